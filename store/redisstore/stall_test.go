package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
)

// TestShortStallCostsItsLength stalls Redis for 250 ms under steady
// traffic (16 callers, a 1 ms round trip and 0.1 ms of their own work
// between calls, the breaker's defaults) and
// counts the calls that failure policies decide once Redis answers again:
// a short stall among many successes must not open the breaker, so from
// the moment the calls caught by the stall have missed their deadline
// (50 ms after it ends) Redis decides every call again. On a virtual
// clock (testing/synctest), with the stall played by execHook, the count
// is exact. TestFrozen stalls a real redis-server.
func TestShortStallCostsItsLength(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stalled atomic.Bool
		var mu sync.Mutex
		var unanswered []time.Time
		s, err := New(Config{Client: neverAnswers{}, Timeout: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
			OnUnavailable: func(UnavailableCall) {
				mu.Lock()
				unanswered = append(unanswered, time.Now())
				mu.Unlock()
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		// Redis answers a call in 1 ms, or not at all while stalled; a
		// script error is an answer that decides nothing (for the
		// breaker, a success).
		answered := fmt.Errorf("answered: %w", ErrScript)
		s.execHook = func(ctx context.Context, _ []*batchItem) error {
			if stalled.Load() {
				<-ctx.Done()
				return ctx.Err()
			}
			time.Sleep(time.Millisecond)
			return answered
		}
		rule := portero.Rule{Name: "r", Algorithm: portero.TokenBucket, Limit: portero.Limit{Count: 1 << 30, Window: time.Hour}}
		stop := make(chan struct{})
		var calls atomic.Int64
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: fmt.Sprint("k", i), Cost: 1}})
					if !errors.Is(err, answered) && !errors.Is(err, portero.ErrStoreUnavailable) {
						t.Errorf("AllowAll: %v", err)
					}
					calls.Add(1)
					time.Sleep(100 * time.Microsecond) // the caller's own work
				}
			})
		}
		time.Sleep(500 * time.Millisecond) // a window of healthy traffic
		stalled.Store(true)
		time.Sleep(250 * time.Millisecond)
		stalled.Store(false)
		thawed := time.Now()
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		during, late := 0, 0
		for _, at := range unanswered {
			if at.After(thawed.Add(50 * time.Millisecond)) {
				late++
			} else {
				during++
			}
		}
		if during == 0 {
			t.Fatal("no call was decided by the failure policy during the stall: the test measured nothing")
		}
		if late > 0 || s.Stats().Breaker != "closed" {
			t.Errorf("%d of %d calls decided without Redis from 50 ms after it answered again (breaker %s), want none: the stall cost more than its length",
				late, calls.Load(), s.Stats().Breaker)
		}
	})
}
