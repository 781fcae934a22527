package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/redis/rueidis"
)

// scriptRun is what execHook saw of one script run.
type scriptRun struct {
	deadline time.Time
	has      bool
	items    []batchItem // copies: the items are reused by their callers
}

// recordRuns makes s record every script run it makes.
func recordRuns(s *Store) (runs func() []scriptRun) {
	var mu sync.Mutex
	var all []scriptRun
	s.execHook = func(ctx context.Context, batch []*batchItem) error {
		d, ok := ctx.Deadline()
		r := scriptRun{deadline: d, has: ok}
		for _, it := range batch {
			r.items = append(r.items, batchItem{queued: it.queued, deadline: it.deadline})
		}
		mu.Lock()
		all = append(all, r)
		mu.Unlock()
		return nil
	}
	return func() []scriptRun {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(all)
	}
}

// burst sends callers concurrent one-hit calls on keys of their own, the
// i-th i×stagger after the first, and returns how long each took; each
// must be admitted or fail for want of Redis, with no decision beside the
// error.
func burst(t *testing.T, s *Store, rule portero.Rule, callers int, stagger time.Duration) []time.Duration {
	t.Helper()
	start := make(chan struct{})
	lat := make([]time.Duration, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			time.Sleep(time.Duration(i) * stagger)
			t0 := time.Now()
			d, err := s.AllowAll(context.Background(), t0, []portero.Hit{{Rule: rule, Key: fmt.Sprint("k", i), Cost: 1}})
			lat[i] = time.Since(t0)
			switch {
			case err == nil && (len(d) != 1 || !d[0].Allowed):
				errs[i] = fmt.Errorf("caller %d: decision %+v: want an admission", i, d)
			case err != nil && (d != nil || !errors.Is(err, portero.ErrStoreUnavailable)):
				errs[i] = fmt.Errorf("caller %d: decisions %+v beside %v: want an unavailable store's error alone", i, d, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return lat
}

// checkRunDeadlines checks that every script run had a deadline, that each
// queued call's deadline was set before it joined the queue (its entry
// plus the timeout), and that a batch runs no longer than the earliest
// deadline of its calls. It returns the batches and the calls they served.
func checkRunDeadlines(t *testing.T, runs []scriptRun, timeout time.Duration) (batches, queued int) {
	t.Helper()
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
	return batches, queued
}

// TestDeadlineIncludesQueueing freezes a real redis-server and sends many
// concurrent one-hit calls, so that most queue behind the two in flight
// and go in batches: every queued call's deadline starts when it enters
// AllowAll, and every script run ends by the earliest deadline among the
// calls it serves (checked from the runs themselves, whatever the speed of
// the machine). TestQueuedCallsWaitAtMostTheTimeout checks the resulting
// bound on each caller's wait on a virtual clock.
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
			// Load the scripts; a loaded machine may make a call miss the
			// deadline, which is an answer too: ask again.
			for try := 0; ; try++ {
				_, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: "warm", Cost: 1}})
				if err == nil {
					break
				}
				if !errors.Is(err, portero.ErrStoreUnavailable) || try == 20 {
					t.Fatal(err)
				}
			}
			runs := recordRuns(s)
			srv.Freeze()
			lat := burst(t, s, rule, callers, 0)
			srv.Thaw()
			batches, queued := checkRunDeadlines(t, runs(), timeout)
			if batches == 0 {
				t.Error("no call was batched: the test checked no queueing")
			}
			slices.Sort(lat)
			t.Logf("%d callers on a frozen Redis, timeout %v: %d script runs, %d batches of %d calls; latency median %v, p99 %v, worst %v",
				callers, timeout, len(runs()), batches, queued, lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
		})
	}
}

// neverAnswers is a client for a Redis that never answers: the store's
// script runs are stopped before it by execHook.
type neverAnswers struct{ rueidis.Client }

func (neverAnswers) Mode() rueidis.ClientMode { return rueidis.ClientModeStandalone }
func (neverAnswers) Close()                   {}

// TestQueuedCallsWaitAtMostTheTimeout: on a virtual clock, with a Redis
// that never answers, no caller waits longer than Config.Timeout from its
// call, whether it ran at once or queued for a batch behind the calls in
// flight (a queued call's wait is spent out of its own deadline, and a
// batch ends by the earliest deadline of its calls).
func TestQueuedCallsWaitAtMostTheTimeout(t *testing.T) {
	for _, callers := range []int{64, 256} {
		t.Run(fmt.Sprint(callers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const timeout = 100 * time.Millisecond
				s, err := New(Config{Client: neverAnswers{}, Timeout: timeout, BreakerMinCalls: 1 << 30,
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close(context.Background())
				var mu sync.Mutex
				batched := 0
				s.execHook = func(ctx context.Context, batch []*batchItem) error {
					mu.Lock()
					batched += len(batch)
					mu.Unlock()
					<-ctx.Done() // Redis does not answer before the deadline
					return ctx.Err()
				}
				rule := portero.Rule{Name: "r", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 1000, Window: time.Hour}}
				// Callers arrive 10 µs apart, so that the queued ones are
				// still waiting when the first calls' deadline frees a slot.
				lat := burst(t, s, rule, callers, 10*time.Microsecond)
				if worst := slices.Max(lat); worst > timeout {
					t.Errorf("a caller waited %v, want at most the %v timeout", worst, timeout)
				}
				if batched == 0 {
					t.Error("no call was batched: the test checked no queueing")
				}
			})
		})
	}
}
