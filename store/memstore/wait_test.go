package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/storetest"
)

// TestWaitEveryAlgorithm: Wait is backpressure for every algorithm, not only
// the queue. Five producers' requests in a row under 2/s return at the
// instants worked by hand below; for the sliding counter, whose waits are
// fractions of its estimate, at the instants the reference store's
// RetryAfter chain gives.
func TestWaitEveryAlgorithm(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// Token bucket, GCRA, leaky meter: burst 2, then one every 0.5 s.
	bucket := []time.Duration{0, 0, ms(500), ms(1000), ms(1500)}
	// Windows of 1 s holding 2: the third and fourth at 1 s, the fifth at 2 s
	// (the sliding log's entries at 0 leave at exactly 1 s).
	window := []time.Duration{0, 0, ms(1000), ms(1000), ms(2000)}
	for _, alg := range portero.Algorithms {
		if alg == portero.LeakyQueue {
			continue // TestWait: a queue's Wait reserves a place
		}
		t.Run(string(alg), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				s, err := memstore.New(memstore.Config{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close(ctx)
				rule := portero.Rule{Name: "w", Algorithm: alg, Limit: portero.PerSecond(2)}
				l := limiter(t, s, rule)
				start := s.Now()
				var got []time.Duration
				for range 5 {
					if err := l.Wait(ctx, "k"); err != nil {
						t.Fatalf("Wait = %v", err)
					}
					got = append(got, s.Now().Sub(start))
				}
				var want []time.Duration
				switch alg {
				case portero.TokenBucket, portero.GCRA, portero.LeakyMeter:
					want = bucket
				case portero.SlidingCounter:
					want = referenceChain(t, rule, start, 5)
				default:
					want = window
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("Wait returned at %v, want %v", got, want)
				}
			})
		})
	}
}

// referenceChain returns when n requests in a row would be admitted by the
// reference store if each, once refused, came back after its RetryAfter.
func referenceChain(t *testing.T, rule portero.Rule, start time.Time, n int) []time.Duration {
	t.Helper()
	ref := storetest.NewReference()
	at, out := start, []time.Duration(nil)
	for len(out) < n {
		d, err := ref.AllowAll(context.Background(), at, []portero.Hit{{Rule: rule, Key: "k", Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if d[0].Allowed {
			out = append(out, at.Sub(start))
			continue
		}
		at = at.Add(d[0].RetryAfter)
	}
	return out
}

// TestWaitProducers: ten producers that Wait on one token bucket (burst 10,
// 10/s) for 5 s get exactly B + r·T = 10 + 10·5 = 60 requests through (the bucket's
// bound for any interval of T seconds, met because some producer
// asks at every instant a token comes back).
func TestWaitProducers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		l := limiter(t, s, portero.Rule{Name: "p", Algorithm: portero.TokenBucket, Limit: portero.PerSecond(10)})
		start := time.Now()
		end := start.Add(5 * time.Second)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				dctx, cancel := context.WithDeadline(ctx, end.Add(time.Nanosecond))
				defer cancel()
				for {
					if err := l.Wait(dctx, "k"); err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("Wait = %v", err)
						}
						return
					}
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if n := admitted.Load(); n != 60 {
			t.Errorf("admitted %d in 5 s, want 60", n)
		}
	})
}

// TestWaitDeadlineAndClose: a wait longer than ctx's deadline returns at
// once with DeadlineExceeded and counts nothing; Close ends a wait.
func TestWaitDeadlineAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		l := limiter(t, s, portero.Rule{Name: "d", Algorithm: portero.TokenBucket, Limit: portero.PerSecond(2)})
		for range 2 {
			if err := l.Wait(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		dctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond) // the next token is 500 ms away
		defer cancel()
		t0 := time.Now()
		if err := l.Wait(dctx, "k"); !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) != 0 {
			t.Errorf("Wait past the deadline = %v after %v, want DeadlineExceeded at once", err, time.Since(t0))
		}
		time.Sleep(500 * time.Millisecond)
		if d, _ := l.AllowN(ctx, "k", s.Now(), 1); !d.Allowed {
			t.Errorf("the token a refused Wait left: %+v, want it still there", d)
		}

		hour := limiter(t, s, portero.Rule{Name: "h", Algorithm: portero.FixedWindowAnchored, Limit: portero.PerHour(1)})
		hour.Wait(ctx, "k")
		errc := make(chan error)
		go func() { errc <- hour.Wait(ctx, "k") }()
		synctest.Wait()
		s.Close(ctx)
		if err := <-errc; !errors.Is(err, portero.ErrClosed) {
			t.Errorf("Wait when the store closed = %v, want ErrClosed", err)
		}
	})
}
