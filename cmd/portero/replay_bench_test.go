package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/replay"
)

// generatedLog is a combined-format log of n lines made as it is read:
// rate lines a second of log time from keys distinct clients in turn, so
// that a test can replay millions of lines without storing them.
type generatedLog struct {
	n, rate, keys, i int
	buf              []byte
	start            time.Time
	sec              int
	stamp            string
}

func newGeneratedLog(n, rate, keys int) *generatedLog {
	return &generatedLog{n: n, rate: rate, keys: keys, start: time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)}
}

func (g *generatedLog) Read(p []byte) (int, error) {
	for len(g.buf) < len(p) && g.i < g.n {
		if s := g.i / g.rate; s != g.sec || g.stamp == "" {
			g.sec, g.stamp = s, g.start.Add(time.Duration(s)*time.Second).Format("02/Jan/2006:15:04:05 -0700")
		}
		c := g.i % g.keys
		b := append(g.buf, "10."...)
		b = strconv.AppendInt(b, int64(c>>16&255), 10)
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(c>>8&255), 10)
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(c&255), 10)
		b = append(b, " - - ["...)
		b = append(b, g.stamp...)
		b = append(b, `] "GET /api/items/`...)
		b = strconv.AppendInt(b, int64(g.i%100), 10)
		g.buf = append(b, ` HTTP/1.1" 200 512 "-" "bench/1"`+"\n"...)
		g.i++
	}
	if len(g.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, g.buf)
	g.buf = g.buf[:copy(g.buf, g.buf[n:])]
	return n, nil
}

func (g *generatedLog) Close() error { return nil }

// simplePolicy is one rule per client, as the benchmark's "simple policy".
const simplePolicy = `
upstreams:
  demo: {type: demo}
routes:
  - {name: api, upstream: demo}
%s
rules:
  - {name: per-ip, key: ip, limit: 10/s}
`

// replayGenerated replays n generated lines and returns the report and the
// most heap in use seen (sampled every minute of log time and at the end,
// after a collection). maxKeys bounds the store; 0 leaves its default.
func replayGenerated(tb testing.TB, n, rate, keys, maxKeys int) (*replay.Report, uint64) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "portero.yaml")
	store := "" // the default bound
	if maxKeys > 0 {
		store = fmt.Sprintf("store: {max_keys: %d}", maxKeys)
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf(simplePolicy, store)), 0o644); err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	d, err := newGatewayDecider(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	defer d.Close()
	rd, err := replay.Open([]string{"generated"}, replay.InputOptions{}, func(string) (io.ReadCloser, error) {
		return newGeneratedLog(n, rate, keys), nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer rd.Close()
	var peak uint64
	sample := func() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	minutes := 0
	rep, err := replay.Replay(context.Background(), rd, d, replay.Options{Tick: func(now time.Time) {
		d.sweep(now)
		if minutes++; minutes%10 == 0 {
			sample()
		}
	}})
	if err != nil {
		tb.Fatal(err)
	}
	sample()
	return rep, peak
}

// TestReplayMemoryBounded: ten times the lines, from ten times the
// distinct clients, take no more memory once the store's bound (max_keys)
// is reached — memory follows the store's bounded state and the top-N
// counters, not the log.
func TestReplayMemoryBounded(t *testing.T) {
	n := 2_000_000
	if testing.Short() || raceEnabled {
		n = 400_000 // the race detector makes it ten times slower
	}
	const maxKeys = 20_000
	small, smallPeak := replayGenerated(t, n/10, 2000, n/10, maxKeys)
	big, bigPeak := replayGenerated(t, n, 2000, n, maxKeys)
	if small.Requests != int64(n/10) || big.Requests != int64(n) || big.Malformed != 0 {
		t.Fatalf("replayed %d and %d lines, want %d and %d", small.Requests, big.Requests, n/10, n)
	}
	t.Logf("peak heap: %d lines %.1f MB, %d lines %.1f MB", n/10, float64(smallPeak)/1e6, n, float64(bigPeak)/1e6)
	// Both runs fill the store to max_keys; what remains is noise of the
	// runtime (a few MB), not a share of the lines.
	if bigPeak > smallPeak+smallPeak/2+4<<20 {
		t.Errorf("peak heap grew from %.1f MB (%d lines) to %.1f MB (%d lines): memory follows the log", float64(smallPeak)/1e6, n/10,
			float64(bigPeak)/1e6, n)
	}
}

// BenchmarkReplay measures lines per second for the simple policy (one
// rule per client) on combined-format lines, and the peak heap; run on
// one core with -cpu 1 (docs/operations.md shows the current figures):
//
//	go test -run '^$' -bench BenchmarkReplay -benchtime 2000000x -count 3 -cpu 1 -benchmem ./cmd/portero
//
// lines/s is against the wall clock; lines/cpu-s against the CPU time the
// process used (getrusage: every goroutine, the collector's included),
// which a shared, loaded machine disturbs less.
func BenchmarkReplay(b *testing.B) {
	b.ReportAllocs()
	defer debug.SetGCPercent(debug.SetGCPercent(replayGCPercent)) // as the command does
	start, cpu0 := time.Now(), cpuTime()
	rep, peak := replayGenerated(b, b.N, 5000, 100_000, 0)
	el, cpu := time.Since(start), cpuTime()-cpu0
	if rep.Requests != int64(b.N) {
		b.Fatalf("replayed %d of %d", rep.Requests, b.N)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "lines/s")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "lines/cpu-s")
	b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
}

// cpuTime is the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
