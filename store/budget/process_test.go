package budget_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/budget"
	"github.com/portero-rl/portero/store/redisstore"
)

// childEnv, set to a Redis URL, makes the test binary one instance of
// TestProcessesNeverOver, deciding the rule of the algorithm in
// childAlgEnv.
const (
	childEnv    = "PORTERO_TEST_BUDGET_INSTANCE"
	childAlgEnv = "PORTERO_TEST_BUDGET_ALGORITHM"
)

// The fleet of TestProcessesNeverOver: four processes offered 150
// requests a second each on one global rule of 200 a second (a
// clock-aligned second, or GCRA with a burst of 200), leased with a 50 ms
// budget, for 5 s.
const (
	childRate = 150
	childFor  = 5 * time.Second
)

func processRule(alg portero.Algorithm) portero.Rule {
	return portero.Rule{Name: "global", Algorithm: alg, Limit: portero.PerSecond(200), Budget: 50 * time.Millisecond}
}

func TestMain(m *testing.M) {
	if url := os.Getenv(childEnv); url != "" {
		os.Exit(instanceProcess(url, portero.Algorithm(os.Getenv(childAlgEnv))))
	}
	os.Exit(m.Run())
}

// instanceProcess decides childRate requests a second for childFor on
// processRule(alg), from leased budgets over Redis at url, each at the
// instant it is read (Redis decides the takes at the caller's clock, the
// machine's). It prints a line per take ("t WINDOW UNITS") and per
// admission ("a WINDOW NANOS"), WINDOW the second in Unix seconds, NANOS
// the instant, as they happen, so that a kill loses none of what was
// admitted.
func instanceProcess(url string, alg portero.Algorithm) int {
	rs, err := redisstore.New(redisstore.Config{URL: url, Prefix: "fleet:", Clock: redisstore.CallerClock, Timeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := budget.New(rs, budget.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	hits := []portero.Hit{{Rule: processRule(alg), Key: "all", Cost: 1}}
	tick := time.NewTicker(time.Second / childRate)
	defer tick.Stop()
	var taken uint64
	for end := time.Now().Add(childFor); time.Now().Before(end); <-tick.C {
		now := time.Now()
		d, err := s.AllowAll(context.Background(), now, hits)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			continue
		}
		win := now.Unix()
		if st := s.Stats(); st.Taken != taken {
			fmt.Printf("t %d %d\n", win, st.Taken-taken)
			taken = st.Taken
		}
		if d[0].Allowed {
			fmt.Printf("a %d %d\n", win, now.UnixNano())
		} else {
			fmt.Println("r")
		}
	}
	s.Close(context.Background())
	fmt.Println("done")
	return 0
}

// fleetLog is what the instances printed: admissions per window, and per
// instance and window the units taken and admitted.
type fleetLog struct {
	mu               sync.Mutex
	admitted         map[int64]int64
	refused          int64
	at               []int64 // the admissions' instants, Unix ns
	takenBy, spentBy []map[int64]int64
	done             []bool
}

func (l *fleetLog) read(i int, r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		l.mu.Lock()
		switch {
		case len(f) == 1 && f[0] == "done":
			l.done[i] = true
		case len(f) == 1 && f[0] == "r":
			l.refused++
		case len(f) == 3 && f[0] == "a":
			w, _ := strconv.ParseInt(f[1], 10, 64)
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			l.admitted[w]++
			l.spentBy[i][w]++
			l.at = append(l.at, ns)
		case len(f) == 3 && f[0] == "t":
			w, _ := strconv.ParseInt(f[1], 10, 64)
			n, _ := strconv.ParseInt(f[2], 10, 64)
			l.takenBy[i][w] += n
		}
		l.mu.Unlock()
	}
}

// TestProcessesNeverOver: four processes on one redis-server, each
// serving one global rule of 200 a second from leased budgets under three
// times that load, never admit more than the rule allows — 200 in every
// clock-aligned second, or, on GCRA, B + r·(τ + T) in every interval τ —
// also when one of them is killed with SIGKILL holding units it took:
// those are lost (never admitted by anyone), to their window until it
// ends, to the bucket for at most T, and the others go on admitting.
func TestProcessesNeverOver(t *testing.T) {
	for _, alg := range []portero.Algorithm{portero.FixedWindow, portero.GCRA} {
		t.Run(string(alg), func(t *testing.T) { processesNeverOver(t, alg) })
	}
}

func processesNeverOver(t *testing.T, alg portero.Algorithm) {
	srv := redistest.Start(t)
	const n = 4
	log := &fleetLog{admitted: map[int64]int64{}, takenBy: make([]map[int64]int64, n), spentBy: make([]map[int64]int64, n), done: make([]bool, n)}
	children := make([]*exec.Cmd, n)
	var readers sync.WaitGroup
	for i := range children {
		log.takenBy[i], log.spentBy[i] = map[int64]int64{}, map[int64]int64{}
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), childEnv+"="+srv.URL(), childAlgEnv+"="+string(alg))
		c.Stderr = os.Stderr
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		children[i] = c
		readers.Go(func() { log.read(i, out) })
	}
	// Kill instance 0 once it has taken units in the current second and
	// holds some it has not spent, half-way through.
	time.Sleep(childFor / 2)
	var killWin, held int64
	for deadline := time.Now().Add(childFor / 2); ; time.Sleep(time.Millisecond) {
		log.mu.Lock()
		killWin = time.Now().Unix()
		held = log.takenBy[0][killWin] - log.spentBy[0][killWin]
		if held > 0 || time.Now().After(deadline) {
			children[0].Process.Kill() // SIGKILL
			log.mu.Unlock()
			break
		}
		log.mu.Unlock()
	}
	children[0].Wait()
	for _, c := range children[1:] {
		if err := c.Wait(); err != nil {
			t.Errorf("instance: %v", err)
		}
	}
	readers.Wait()
	checkWindows(t, log, processRule(alg), killWin, held)
	stats, err := redistest.Do(srv.Addr(), "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("redis commandstats:\n%s", stats)
}

// checkWindows checks what the fleet admitted against rule's bound and
// logs the kill.
func checkWindows(t *testing.T, log *fleetLog, rule portero.Rule, killWin, held int64) {
	t.Helper()
	limit := rule.Limit.Count
	var total int64
	for w, got := range log.admitted {
		total += got
		if got > limit && rule.Algorithm == portero.FixedWindow {
			t.Errorf("window %d: %d admitted by the fleet, limit %d", w, got, limit)
		}
	}
	if rule.Algorithm == portero.GCRA {
		checkBucket(t, log.at, rule)
	}
	if len(log.admitted) < 4 || total == 0 {
		t.Fatalf("%d windows, %d admitted: the fleet did not run", len(log.admitted), total)
	}
	after := log.admitted[killWin+1]
	if after == 0 {
		t.Errorf("window after the kill: nothing admitted, want the three others to go on")
	}
	t.Logf("instance 0 killed in second %d holding %d units (lost): it admitted %d there, the fleet %d; %d the window after; %d over %d windows",
		killWin, held, log.spentBy[0][killWin], log.admitted[killWin], after, total, len(log.admitted))
	for _, w := range slices.Sorted(maps.Keys(log.admitted)) {
		t.Logf("window %d: %d admitted", w, log.admitted[w])
	}
	t.Logf("%d decisions, %d refused", total+log.refused, log.refused)
}

// checkBucket checks that the admissions at (Unix ns) never pass
// B + r·(τ + T) in any interval of length τ.
func checkBucket(t *testing.T, at []int64, rule portero.Rule) {
	t.Helper()
	slices.Sort(at)
	rate := float64(rule.Limit.Count) / rule.Limit.Window.Seconds()
	for _, tau := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second, childFor} {
		bound := rule.Limit.Capacity() + int64(math.Ceil(rate*(tau+rule.BudgetLifetime()).Seconds()))
		worst, j := 0, 0
		for i := range at {
			for at[i]-at[j] >= int64(tau) {
				j++
			}
			worst = max(worst, i-j+1)
		}
		if int64(worst) > bound {
			t.Errorf("τ = %v: %d admitted by the fleet, bound B + r(τ+T) = %d", tau, worst, bound)
		}
		t.Logf("τ = %v: at most %d admitted (bound %d)", tau, worst, bound)
	}
}
