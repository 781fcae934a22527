package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
)

// TestDeadlineIncludesQueueing freezes a real redis-server and sends many
// concurrent one-hit calls, so that most queue behind the two in flight
// and go in batches. Before, a queued call waited for the call in flight
// (its full Timeout) and then for its own batch (another Timeout, started
// when the batch was sent): 2-3 × Timeout at 64-256 callers.
//
// The mechanism is checked exactly, without trusting the wall clock of a
// loaded machine: every queued call's deadline was set before it joined
// the queue (it is its entry plus Timeout), and every script run's context
// ends no later than the earliest deadline among the calls it serves. The
// wall clock is checked loosely: nine callers in ten are back within
// Timeout plus a generous allowance for scheduling, where the old code
// needed about twice the Timeout or more.
func TestDeadlineIncludesQueueing(t *testing.T) {
	for _, callers := range []int{64, 256} {
		t.Run(fmt.Sprint(callers), func(t *testing.T) {
			const timeout = 100 * time.Millisecond
			srv := redistest.Start(t)
			s, err := New(Config{URL: srv.URL(), Timeout: timeout,
				BreakerMinCalls: 1 << 30, // the breaker stays closed: every call goes to Redis
				Logger:          slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			rule := portero.Rule{Name: "r", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 1000, Window: time.Hour}}
			if _, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: "warm", Cost: 1}}); err != nil {
				t.Fatal(err)
			}

			type run struct {
				deadline time.Time
				has      bool
				items    []batchItem // copies: the items are reused by their callers
			}
			var mu sync.Mutex
			var runs []run
			s.execHook = func(ctx context.Context, batch []*batchItem) {
				d, ok := ctx.Deadline()
				r := run{deadline: d, has: ok}
				for _, it := range batch {
					r.items = append(r.items, batchItem{queued: it.queued, deadline: it.deadline})
				}
				mu.Lock()
				runs = append(runs, r)
				mu.Unlock()
			}

			srv.Freeze()
			// A loaded machine can stop the whole process for a while (every
			// caller late together): a probe measures such stalls, and the
			// wall-clock bound below allows for them, not for the mechanism.
			probeDone := make(chan struct{})
			stall := make(chan time.Duration, 1)
			go func() {
				var worst time.Duration
				for {
					select {
					case <-probeDone:
						stall <- worst
						return
					default:
					}
					t0 := time.Now()
					time.Sleep(time.Millisecond)
					worst = max(worst, time.Since(t0)-time.Millisecond)
				}
			}()
			start := make(chan struct{})
			lat := make([]time.Duration, callers)
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					<-start
					t0 := time.Now()
					d, err := s.AllowAll(context.Background(), t0, []portero.Hit{{Rule: rule, Key: fmt.Sprint("k", i), Cost: 1}})
					lat[i] = time.Since(t0)
					switch {
					case err == nil && (len(d) != 1 || !d[0].Allowed):
						err = fmt.Errorf("decision %+v: want an admission", d)
					case err != nil && (d != nil || !errors.Is(err, portero.ErrStoreUnavailable)):
						err = fmt.Errorf("decisions %+v beside %v: want an unavailable store's error alone", d, err)
					default:
						err = nil // a timeout is an answer: the caller's failure policy decides
					}
					errs[i] = err
				})
			}
			close(start)
			wg.Wait()
			close(probeDone)
			stalled := <-stall
			srv.Thaw()

			for i, err := range errs {
				if err != nil {
					t.Fatalf("caller %d: %v", i, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			batches, queued := 0, 0
			for i, r := range runs {
				if !r.has {
					t.Fatalf("script run %d had no deadline", i)
				}
				if len(r.items) == 0 {
					continue
				}
				batches++
				earliest := r.items[0].deadline
				for j, it := range r.items {
					queued++
					if it.deadline.IsZero() {
						t.Fatalf("run %d, item %d: a queued call without a deadline", i, j)
					}
					if it.deadline.After(it.queued.Add(timeout)) {
						t.Fatalf("run %d, item %d: deadline %v after joining the queue, want at most the Timeout %v (it starts at entry)",
							i, j, it.deadline.Sub(it.queued), timeout)
					}
					if it.deadline.Before(earliest) {
						earliest = it.deadline
					}
				}
				if r.deadline.After(earliest) {
					t.Errorf("batch run %d of %d calls ends %v after the earliest of their deadlines", i, len(r.items), r.deadline.Sub(earliest))
				}
			}
			slices.Sort(lat)
			worst := lat[len(lat)-1]
			t.Logf("%d callers on a frozen Redis, timeout %v: %d script runs, %d batches of %d calls; latency median %v, p99 %v, worst %v; longest stall of the process %v",
				callers, timeout, len(runs), batches, queued, lat[len(lat)/2], lat[len(lat)*99/100], worst, stalled)
			// Loose, and on the 90th percentile: under the old code most queued
			// callers waited 2-3 × the timeout, so p90 was far above this bound;
			// a rare straggler on a loaded machine (once 1.1 s, with the
			// process otherwise running) is logged, not failed.
			p90 := lat[len(lat)*9/10]
			if allowance := 100*time.Millisecond + stalled; p90 > timeout+allowance {
				t.Errorf("90th percentile caller took %v, want at most the %v deadline plus %v for scheduling (100ms and the process's longest measured stall)", p90, timeout, allowance)
			}
		})
	}
}
