package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/budget"
	"github.com/portero-rl/portero/store/redisstore"
)

// This file needs nothing but Portero and the standard library: make vet
// and make test vet and run it alone, by file name, without building the
// peers of the other benchmarks.

// workerEnv, set to a JSON fleetWorker, makes the test binary one process
// of BenchmarkLeasedGlobal's fleet instead of running tests (TestMain).
const workerEnv = "PORTERO_BENCH_LEASED_WORKER"

// The fleet of BenchmarkLeasedGlobal: fleetProcesses operating-system
// processes, each deciding from fleetGoroutines goroutines on one store
// client, on one global rule: a clock-aligned second of 10,000,000, above
// what either mode decides on one Redis in a second, so that both run at
// their own speed (peak-admitted/s shows how far below the limit).
const (
	fleetProcesses  = 4
	fleetGoroutines = 8
	fleetBudget     = 50 * time.Millisecond
)

var fleetRule = portero.Rule{Name: "global", Algorithm: portero.FixedWindow, Limit: portero.PerSecond(10_000_000)}

func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(fleetProcess(spec))
	}
	os.Exit(m.Run())
}

// fleetWorker is what one process of the fleet decides.
type fleetWorker struct {
	Addr      string        // the redis-server
	Prefix    string        // the store's key prefix: a fresh rule state per run
	Budget    time.Duration // the rule's Budget: 0 exact, else leased
	Decisions int           // how many decisions this process makes
}

// fleetResult is what one process decided: Admitted counts the hits
// admitted per clock-aligned second (Unix second), Start and End bound the
// decision loop (Unix ns).
type fleetResult struct {
	Decisions  int64
	Admitted   map[int64]int64
	Errors     int64
	FirstError string
	Start, End int64
}

// fleetProcess is one process of the fleet: it connects, prints "ready",
// waits for a line on stdin, makes its decisions from fleetGoroutines
// goroutines, closes its store (a leased one gives back what it holds)
// and prints its fleetResult as one JSON line. It returns the exit code.
func fleetProcess(spec string) int {
	var w fleetWorker
	if err := json.Unmarshal([]byte(spec), &w); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", workerEnv, err)
		return 2
	}
	// CallerClock: Redis decides each hit in the second this process
	// counts it in, so that the fleet's sums per second are Redis's.
	rs, err := redisstore.New(redisstore.Config{Addrs: []string{w.Addr}, Prefix: w.Prefix, Clock: redisstore.CallerClock,
		Timeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var s portero.Store = rs
	if w.Budget > 0 {
		if s, err = budget.New(rs, budget.Config{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	rule := fleetRule
	rule.Budget = w.Budget
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "waiting for the start:", err)
		return 1
	}
	res := fleetResult{Admitted: map[int64]int64{}, Start: time.Now().UnixNano()}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range fleetGoroutines {
		wg.Go(func() {
			admitted := map[int64]int64{}
			var n, errs int64
			var first error
			hits := []portero.Hit{{Rule: rule, Key: "all", Cost: 1}}
			for next.Add(1) <= int64(w.Decisions) {
				now := time.Now()
				d, err := s.AllowAll(context.Background(), now, hits)
				n++
				switch {
				case err != nil:
					errs++
					if first == nil {
						first = err
					}
				case d[0].Allowed:
					admitted[now.Unix()]++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.Decisions += n
			res.Errors += errs
			if first != nil && res.FirstError == "" {
				res.FirstError = first.Error()
			}
			for sec, a := range admitted {
				res.Admitted[sec] += a
			}
		})
	}
	wg.Wait()
	res.End = time.Now().UnixNano()
	s.Close(context.Background())
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// fleetRun is what BenchmarkLeasedGlobal measured in one run of a mode.
type fleetRun struct {
	decisions  int64
	wall       time.Duration
	commands   float64 // every command Redis ran, per decision
	scripts    float64 // script calls, per decision
	scriptUsec float64 // Redis's µs per script call
	peak       int64   // the most admitted in one clock-aligned second
}

func (r fleetRun) perSecond() float64 { return float64(r.decisions) / r.wall.Seconds() }

var fleetRuns atomic.Int64 // numbers the runs' key prefixes

// BenchmarkLeasedGlobal: one global rule decided by fleetProcesses
// processes (this test binary run again, see TestMain) on one
// redis-server, exact (every decision in Redis, the store running
// concurrent one-hit calls as one script) then leased (store/budget in
// front of each process's client, a 50 ms budget), side by side. b.N
// decisions are split evenly across the processes, so that testing.B
// sizes the run to -benchtime as for any benchmark; the processes'
// start-up is outside the timer, and decisions/s is the fleet's decisions
// over the wall time from the first process's start to the last one's
// end, so a process that lags counts against the fleet. It reports
// redis-cmds/op, every command Redis ran (INFO commandstats after CONFIG
// RESETSTAT, the harness's own left out) per decision, redis-calls/op, the
// script calls among them, Redis's time per script call (µs) and the
// most admitted in a clock-aligned second; it fails if any second admits
// more than the limit, summed over the processes. The leased mode also
// reports its figures against the exact mode's runs of this invocation
// (compareFleetRuns), and fails unless it meets the targets.
//
//	cd bench && go test -run '^$' -bench BenchmarkLeasedGlobal -benchtime 2s -count 3 .
func BenchmarkLeasedGlobal(b *testing.B) {
	srv := redistest.Start(b)
	bin, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	var exact fleetRun // the exact mode's runs of at least a second, pooled
	for _, mode := range []string{"exact", "leased"} {
		b.Run(mode, func(b *testing.B) {
			w := fleetWorker{Addr: srv.Addr(), Prefix: fmt.Sprintf("%s:%d:", mode, fleetRuns.Add(1))}
			if mode == "leased" {
				w.Budget = fleetBudget
			}
			r := runFleet(b, bin, w)
			b.ReportMetric(r.perSecond(), "decisions/s")
			b.ReportMetric(r.commands, "redis-cmds/op")
			b.ReportMetric(r.scripts, "redis-calls/op")
			b.ReportMetric(r.scriptUsec, "redis-µs/call")
			b.ReportMetric(float64(r.peak), "peak-admitted/s")
			switch {
			case mode == "exact" && r.wall >= time.Second:
				exact.pool(r)
			case mode == "leased" && r.wall >= time.Second:
				compareFleetRuns(b, exact, r)
			}
		})
	}
}

// pool adds run to r: decisions and wall time summed, commands per
// decision averaged over the decisions. Only what compareFleetRuns reads.
func (r *fleetRun) pool(run fleetRun) {
	d := r.decisions + run.decisions
	r.commands = (r.commands*float64(r.decisions) + run.commands*float64(run.decisions)) / float64(d)
	r.decisions, r.wall = d, r.wall+run.wall
}

// compareFleetRuns reports leased's decisions/s and Redis commands per
// decision as fractions of exact's, and fails unless leased decides at
// least 5× as many per second at most 1/20 of the commands per decision.
// Runs shorter than a second (testing.B's first guesses at b.N, or a
// short -benchtime) are neither pooled nor compared: process start-up and
// the first takes weigh too much in them.
func compareFleetRuns(b *testing.B, exact, leased fleetRun) {
	if exact.wall == 0 {
		return
	}
	speed, cmds := leased.perSecond()/exact.perSecond(), leased.commands/exact.commands
	b.ReportMetric(speed, "vs-exact-decisions/s")
	b.ReportMetric(cmds, "vs-exact-redis-cmds")
	if speed < 5 || cmds > 1.0/20 {
		b.Errorf("leased decides %.1f× the exact mode's decisions/s with %.5f× its Redis commands per decision: want at least 5× with at most 1/20", speed, cmds)
	}
}

// runFleet runs one mode: b.N decisions split across fleetProcesses
// processes started (outside the timer) from bin.
func runFleet(b *testing.B, bin string, w fleetWorker) fleetRun {
	b.StopTimer()
	procs := make([]*fleetProc, fleetProcesses)
	for i := range procs {
		pw := w
		pw.Decisions = b.N / fleetProcesses
		if i < b.N%fleetProcesses {
			pw.Decisions++
		}
		procs[i] = startFleetProc(b, bin, pw)
	}
	for _, p := range procs {
		if l := p.line(b); l != "ready" {
			b.Fatalf("fleet process %d: %q, want ready", p.cmd.Process.Pid, l)
		}
	}
	if _, err := redistest.Do(w.Addr, "CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	for _, p := range procs {
		p.stdin.Write([]byte("go\n"))
	}
	var run fleetRun
	admitted := map[int64]int64{}
	var start, end int64
	for i, p := range procs {
		var res fleetResult
		if err := json.Unmarshal([]byte(p.line(b)), &res); err != nil {
			b.Fatalf("fleet process %d: %v", p.cmd.Process.Pid, err)
		}
		if res.Errors > 0 {
			b.Fatalf("fleet process %d: %d errors, the first: %s", p.cmd.Process.Pid, res.Errors, res.FirstError)
		}
		run.decisions += res.Decisions
		for sec, n := range res.Admitted {
			admitted[sec] += n
		}
		if i == 0 || res.Start < start {
			start = res.Start
		}
		end = max(end, res.End)
	}
	b.StopTimer()
	run.wall = time.Duration(end - start)
	if run.decisions != int64(b.N) {
		b.Fatalf("the fleet made %d decisions, want %d", run.decisions, b.N)
	}
	run.redisCost(b, w.Addr)
	for _, sec := range slices.Sorted(maps.Keys(admitted)) {
		n := admitted[sec]
		run.peak = max(run.peak, n)
		if n > fleetRule.Limit.Count {
			b.Errorf("second %d: %d admitted by the fleet, limit %d", sec, n, fleetRule.Limit.Count)
		}
	}
	for _, p := range procs {
		p.stdin.Close()
		if err := p.cmd.Wait(); err != nil {
			b.Fatalf("fleet process %d: %v: %s", p.cmd.Process.Pid, err, p.stderr.String())
		}
	}
	return run
}

// fleetProc is one running process of the fleet.
type fleetProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	stderr bytes.Buffer
}

// startFleetProc starts bin as the fleet process w; the test's cleanup
// kills it if it is still running.
func startFleetProc(b *testing.B, bin string, w fleetWorker) *fleetProc {
	spec, err := json.Marshal(w)
	if err != nil {
		b.Fatal(err)
	}
	p := &fleetProc{cmd: exec.Command(bin)}
	p.cmd.Env = append(os.Environ(), workerEnv+"="+string(spec))
	p.cmd.Stderr = &p.stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	p.out = bufio.NewScanner(stdout)
	p.out.Buffer(nil, 1<<20)
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	return p
}

// line is the process's next line of output; the benchmark fails if it
// ended instead.
func (p *fleetProc) line(b *testing.B) string {
	if !p.out.Scan() {
		p.cmd.Wait()
		b.Fatalf("fleet process %d ended early (%v): %s", p.cmd.Process.Pid, p.cmd.ProcessState, p.stderr.String())
	}
	return p.out.Text()
}

// redisCost sets r's Redis figures per decision from INFO commandstats:
// every command (those the scripts call included), the harness's CONFIG
// RESETSTAT left out, and the script calls with Redis's time per call.
func (r *fleetRun) redisCost(b *testing.B, addr string) {
	stats := commandStats(b, addr)
	var cmds int64
	for name, c := range stats {
		if !strings.HasPrefix(name, "config|") {
			cmds += c.calls
		}
	}
	var script cmdStat
	for _, name := range []string{"fcall", "evalsha", "eval"} {
		script.calls += stats[name].calls
		script.usec += stats[name].usec
	}
	r.commands = float64(cmds) / float64(r.decisions)
	r.scripts = float64(script.calls) / float64(r.decisions)
	r.scriptUsec = float64(script.usec) / float64(max(script.calls, 1))
}

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

var cmdStatRE = regexp.MustCompile(`cmdstat_([^:]+):calls=(\d+),usec=(\d+)`)

// commandStats is INFO commandstats of the server at addr: every command
// (a subcommand as "config|resetstat") Redis ran since its last
// RESETSTAT, the INFO that reads them excluded.
func commandStats(tb testing.TB, addr string) map[string]cmdStat {
	tb.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		tb.Fatal(err)
	}
	stats := map[string]cmdStat{}
	for _, m := range cmdStatRE.FindAllStringSubmatch(info, -1) {
		calls, _ := strconv.ParseInt(m[2], 10, 64)
		usec, _ := strconv.ParseInt(m[3], 10, 64)
		stats[m[1]] = cmdStat{calls, usec}
	}
	if len(stats) == 0 {
		tb.Fatalf("no command in INFO commandstats of %s:\n%s", addr, info)
	}
	return stats
}
