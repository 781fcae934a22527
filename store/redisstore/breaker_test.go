package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/store/redisstore"
)

// traffic runs callers that decide one hit each in a loop until stop, and
// records when Redis did not decide (OnFallback: the caller's failure
// policy would).
type traffic struct {
	store     *redisstore.Store
	log       *testenv.Buffer
	calls     atomic.Int64
	errs      atomic.Int64 // errors other than an unavailable store's
	mu        sync.Mutex
	fallbacks []time.Time
}

func newTraffic(t *testing.T, srv *redistest.Server, timeout time.Duration, batch int) *traffic {
	tr := &traffic{log: &testenv.Buffer{}}
	// The breaker's defaults: that is what is measured.
	tr.store = newStore(t, srv, redisstore.Config{Timeout: timeout, Batch: batch,
		Logger: slog.New(slog.NewTextHandler(tr.log, nil)),
		OnFallback: func(redisstore.Fallback) {
			now := time.Now()
			tr.mu.Lock()
			tr.fallbacks = append(tr.fallbacks, now)
			tr.mu.Unlock()
		}})
	return tr
}

func (tr *traffic) run(callers int, stop <-chan struct{}) *sync.WaitGroup {
	rule := portero.Rule{Name: "r", Algorithm: portero.TokenBucket, Limit: portero.Limit{Count: 1 << 30, Window: time.Hour}}
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			key := fmt.Sprint("k", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := tr.store.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: key, Cost: 1}}); err != nil && !errors.Is(err, portero.ErrStoreUnavailable) {
					tr.errs.Add(1)
				}
				tr.calls.Add(1)
			}
		})
	}
	return &wg
}

// TestShortStallCostsItsLength freezes a real redis-server for 250 ms under
// steady traffic and measures what the stall costs: how long after SIGCONT
// failure policies still decide calls. Before, five consecutive timeouts
// opened the breaker for a second, so a 150-240 ms stall gave about 1.15 s
// of fallback, most of it with Redis healthy again; now the breaker opens
// on a failure ratio over a window (a short stall among many successes is
// not enough) and probes after 100 ms, so the stall costs about its own
// length: calls are decided by Redis again as soon as it answers. Under a
// loaded machine a stray call elsewhere may miss its deadline, so the test
// counts the calls decided by a policy from 300 ms after SIGCONT on, as a
// share of all calls then, rather than the span from first to last.
func TestShortStallCostsItsLength(t *testing.T) {
	srv := redistest.Start(t)
	tr := newTraffic(t, srv, 50*time.Millisecond, 0)
	stop := make(chan struct{})
	wg := tr.run(16, stop)
	time.Sleep(500 * time.Millisecond) // a window of healthy traffic
	frozeAt := time.Now()
	srv.Freeze()
	time.Sleep(250 * time.Millisecond)
	srv.Thaw()
	thawedAt := time.Now()
	time.Sleep(300 * time.Millisecond)
	settled, before := time.Now(), tr.calls.Load()
	time.Sleep(1200 * time.Millisecond) // longer than an old breaker's second
	close(stop)
	wg.Wait()
	after := tr.calls.Load() - before
	if e := tr.errs.Load(); e > 0 {
		t.Fatalf("%d calls returned errors", e)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var during, late int
	var last time.Time
	for _, at := range tr.fallbacks {
		switch {
		case at.Before(frozeAt):
		case at.Before(settled):
			during++
			last = at
		default:
			late++
		}
	}
	if during == 0 {
		t.Fatal("no call was decided by the failure policy during the freeze: the test measured nothing")
	}
	t.Logf("stall %v (Freeze to Thaw): %d calls decided by the failure policy until %v after the freeze began (%v after Thaw); %d of %d calls from 300 ms after Thaw on; breaker opened: %v",
		thawedAt.Sub(frozeAt).Round(time.Millisecond), during, last.Sub(frozeAt).Round(time.Millisecond),
		last.Sub(thawedAt).Round(time.Millisecond), late, after, strings.Contains(tr.log.String(), "circuit breaker open"))
	if share := float64(late) / float64(max(after, 1)); share > 0.05 {
		t.Errorf("%d of %d calls (%.1f%%) decided without Redis from 300 ms after it answered again, want next to none: the stall cost more than its length",
			late, after, 100*share)
	}
}

// TestLoadedHostKeepsBreakerClosed runs traffic against a healthy
// redis-server on a CPU-starved host, where the kernel leaves redis-server
// (and its clients) without a CPU for longer than the deadline now and
// then. Being descheduled looks to the process and to its clients exactly
// like SIGSTOP then SIGCONT, so that is how the test starves it: 70 ms
// without CPU every 500 ms, with a 50 ms deadline, while the test's own
// process also competes for the CPUs. The calls in flight during a stall
// all miss the deadline at once and are decided by the failure policy
// (fail-open: uncounted), one by one; the breaker must not turn each stall
// into a second of uncounted traffic. Before, one stall was 32
// consecutive failures, which opened the breaker for a second.
func TestLoadedHostKeepsBreakerClosed(t *testing.T) {
	srv := redistest.Start(t)
	// Unbatched (Batch 1, as on a cluster): every caller has its own call
	// in flight, so a stall fails them all.
	tr := newTraffic(t, srv, 50*time.Millisecond, 1)
	stop := make(chan struct{})
	var load sync.WaitGroup
	load.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			srv.Freeze()
			time.Sleep(70 * time.Millisecond)
			srv.Thaw()
		}
	})
	for range runtime.GOMAXPROCS(0) {
		load.Go(func() { // competing for the CPUs, in bursts
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
				}
			}
		})
	}
	wg := tr.run(32, stop)
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	load.Wait()
	tr.mu.Lock()
	n := len(tr.fallbacks)
	tr.mu.Unlock()
	calls := tr.calls.Load()
	if e := tr.errs.Load(); e > 0 {
		t.Fatalf("%d of %d calls returned errors", e, calls)
	}
	share := float64(n) / float64(max(calls, 1))
	opened := strings.Count(tr.log.String(), "circuit breaker open")
	t.Logf("redis-server without CPU 70 ms in every 500, 50ms deadline, CPU load: %d of %d calls (%.2f%%) missed the deadline and passed uncounted; breaker opened %d times",
		n, calls, 100*share, opened)
	if n == 0 {
		t.Error("no call missed the deadline: the stalls caught nothing, the test measured nothing")
	}
	if opened > 0 {
		t.Errorf("the breaker opened %d times (%.2f%% of calls passed uncounted)", opened, 100*share)
	}
	if share > 0.05 {
		t.Errorf("%.2f%% of calls passed uncounted, want only those a stall caught (at most 5%%)", 100*share)
	}
}
