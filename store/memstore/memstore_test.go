package memstore_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T, cfg memstore.Config) *memstore.Store {
	t.Helper()
	s, err := memstore.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func TestConformance(t *testing.T) {
	for _, cfg := range []memstore.Config{
		{},
		{Shards: 1, SweepInterval: -1},
		{Shards: 64, MaxKeys: 1 << 12},
	} {
		t.Run(fmt.Sprintf("shards=%d,maxkeys=%d", cfg.Shards, cfg.MaxKeys), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) portero.Store { return newStore(t, cfg) })
		})
	}
}

func limiter(t *testing.T, s *memstore.Store, r portero.Rule) *memstore.Limiter {
	t.Helper()
	l, err := s.Limiter(r)
	if err != nil {
		t.Fatalf("Limiter(%+v) = %v", r, err)
	}
	return l
}

// The Limiter form decides exactly what the Reference decides for single
// hits, for every algorithm, with time that sometimes goes back.
func TestLimiterMatchesReference(t *testing.T) {
	ctx := context.Background()
	for _, a := range portero.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, memstore.Config{Shards: 2})
			ref := storetest.NewReference()
			var rules []portero.Rule
			for _, r := range storetest.RandomRules() {
				if r.Algorithm == a {
					rules = append(rules, r)
				}
			}
			lims := map[portero.Rule]*memstore.Limiter{}
			for _, r := range rules {
				lims[r] = limiter(t, s, r)
			}
			for i, c := range storetest.RandomTrace(7, rules, 3000, true) {
				h := c.Hits[0]
				now := storetest.Base.Add(c.At)
				got, err := lims[h.Rule].AllowN(ctx, h.Key, now, h.Cost)
				if err != nil {
					t.Fatalf("call %d: AllowN = %v", i, err)
				}
				want, err := ref.AllowAll(ctx, now, []portero.Hit{h})
				if err != nil {
					t.Fatal(err)
				}
				if got != want[0] {
					t.Fatalf("call %d %v:\n got %+v\nwant %+v", i, c, got, want[0])
				}
			}
		})
	}
}

func TestErrorsAndClose(t *testing.T) {
	ctx := context.Background()
	if _, err := memstore.New(memstore.Config{Shards: -1}); err == nil {
		t.Error("New(Shards: -1) succeeded")
	}
	if _, err := memstore.New(memstore.Config{MaxKeys: -1}); err == nil {
		t.Error("New(MaxKeys: -1) succeeded")
	}
	s := newStore(t, memstore.Config{})
	if _, err := s.Limiter(portero.Rule{Algorithm: portero.GCRA}); !errors.Is(err, portero.ErrInvalidLimit) {
		t.Errorf("Limiter(zero limit) = %v, want ErrInvalidLimit", err)
	}
	if _, err := s.Limiter(portero.Rule{Algorithm: "nope", Limit: portero.PerSecond(1)}); !errors.Is(err, portero.ErrUnknownAlgorithm) {
		t.Errorf("Limiter(unknown algorithm) = %v, want ErrUnknownAlgorithm", err)
	}
	l := limiter(t, s, portero.Rule{Name: "r", Algorithm: portero.TokenBucket, Limit: portero.PerSecond(5)})
	for _, c := range []struct {
		cost int64
		want error
	}{{0, portero.ErrInvalidCost}, {-3, portero.ErrInvalidCost}, {6, portero.ErrCostExceedsLimit}} {
		if _, err := l.AllowN(ctx, "k", time.Now(), c.cost); !errors.Is(err, c.want) {
			t.Errorf("AllowN(cost %d) = %v, want %v", c.cost, err, c.want)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if _, err := l.Allow(ctx, "k"); !errors.Is(err, portero.ErrClosed) {
		t.Errorf("Allow after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Limiter(portero.Rule{Algorithm: portero.GCRA, Limit: portero.PerSecond(1)}); !errors.Is(err, portero.ErrClosed) {
		t.Errorf("Limiter after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(ctx); !errors.Is(err, portero.ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
}

func TestTimeBackwardsCreatesNoCapacity(t *testing.T) {
	ctx := context.Background()
	t0 := storetest.Base.Add(time.Hour)
	for _, a := range portero.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, memstore.Config{})
			l := limiter(t, s, portero.Rule{Algorithm: a, Limit: portero.PerMinute(10)})
			if d, err := l.AllowN(ctx, "k", t0, 10); err != nil || !d.Allowed {
				t.Fatalf("AllowN(10) = %+v, %v", d, err)
			}
			for _, back := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour} {
				if d, _ := l.AllowN(ctx, "k", t0.Add(-back), 1); d.Allowed {
					t.Errorf("%v back: allowed %+v after the limit was used up", back, d)
				}
			}
		})
	}
}

func TestAllocs(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, memstore.Config{})
	for _, a := range portero.Algorithms {
		if a == portero.SlidingLog {
			continue // its log grows, by design
		}
		l := limiter(t, s, portero.Rule{Algorithm: a, Limit: portero.PerSecond(1000)})
		now := storetest.Base
		l.AllowN(ctx, "hot", now, 1)
		n := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			l.AllowN(ctx, "hot", now, 1)
		})
		if n != 0 {
			t.Errorf("%s: %v allocations per decision on an existing key, want 0", a, n)
		}
	}
	// The forms that read the clock, exact and coarse.
	coarse := newStore(t, memstore.Config{ClockResolution: time.Millisecond})
	for name, st := range map[string]*memstore.Store{"exact": s, "coarse": coarse} {
		l := limiter(t, st, portero.Rule{Name: "clock", Algorithm: portero.GCRA, Limit: portero.PerSecond(1000)})
		l.Allow(ctx, "hot")
		if n := testing.AllocsPerRun(1000, func() { l.Allow(ctx, "hot") }); n != 0 {
			t.Errorf("Allow with the %s clock: %v allocations per decision, want 0", name, n)
		}
	}
	// AllowAll allocates the decisions it returns, and nothing else for a
	// call of up to four hits on existing keys.
	r1 := portero.Rule{Name: "one", Algorithm: portero.GCRA, Limit: portero.PerSecond(1000)}
	r2 := portero.Rule{Name: "two", Algorithm: portero.FixedWindow, Limit: portero.PerSecond(1000)}
	for _, hits := range [][]portero.Hit{
		{{Rule: r1, Key: "hot", Cost: 1}},
		{{Rule: r1, Key: "hot", Cost: 1}, {Rule: r2, Key: "hot", Cost: 1}, {Rule: r2, Key: "warm", Cost: 1}, {Rule: r1, Key: "hot", Cost: 1}},
	} {
		now := storetest.Base
		s.AllowAll(ctx, now, hits)
		n := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			s.AllowAll(ctx, now, hits)
		})
		if n != 1 {
			t.Errorf("AllowAll of %d hits: %v allocations per call, want 1 (the decisions)", len(hits), n)
		}
	}
}

// Concurrent decisions on one key lose no update: exactly the limit passes,
// for a lock-free (GCRA, leaky queue) and a locked algorithm beside a
// sliding log, with all-or-nothing calls of both rules in both orders.
func TestConcurrentExact(t *testing.T) {
	ctx := context.Background()
	for _, a := range []portero.Algorithm{portero.FixedWindow, portero.GCRA, portero.LeakyQueue, portero.TokenBucket} {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, memstore.Config{})
			r1 := portero.Rule{Name: "one", Algorithm: a, Limit: portero.PerHour(1000)}
			r2 := portero.Rule{Name: "two", Algorithm: portero.SlidingLog, Limit: portero.PerHour(1500)}
			l := limiter(t, s, r1)
			now := storetest.Base
			var allowed, allowedAll atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{}) // all at once, so that they race
			for g := range 8 {
				wg.Go(func() {
					<-start
					for i := range 300 {
						if g%2 == 0 {
							if d, err := l.AllowN(ctx, "k", now, 1); err == nil && d.Allowed {
								allowed.Add(1)
							}
							continue
						}
						// Both orders of the same two rules: a deadlock would hang.
						hits := []portero.Hit{{Rule: r1, Key: "k", Cost: 1}, {Rule: r2, Key: "k", Cost: 1}}
						if i%2 == 0 {
							hits[0], hits[1] = hits[1], hits[0]
						}
						ds, err := s.AllowAll(ctx, now, hits)
						if err == nil && ds[0].Allowed && ds[1].Allowed {
							allowedAll.Add(1)
						}
					}
				})
			}
			close(start)
			wg.Wait()
			if got := allowed.Load() + allowedAll.Load(); got != 1000 {
				t.Errorf("admitted %d on a limit of 1000", got)
			}
			// The sliding log counted only the admitted pairs.
			d, err := s.AllowAll(ctx, now, []portero.Hit{{Rule: r2, Key: "k", Cost: 1}})
			if err != nil || d[0].Remaining != 1500-allowedAll.Load()-1 {
				t.Errorf("sliding log after %d admitted pairs: %+v, %v", allowedAll.Load(), d, err)
			}
		})
	}
}

// Many goroutines deciding on one key at the same instant get, between
// them, exactly the decisions the Reference makes for as many requests one
// after the other (requests alike at one instant decide the same in any
// order, so the multisets must be equal), round after round, for every
// algorithm, through Limiter.AllowN and one-hit AllowAll calls.
func TestConcurrentOneKeyMatchesReference(t *testing.T) {
	ctx := context.Background()
	const goroutines, perRound = 8, 25
	for _, a := range portero.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, memstore.Config{})
			ref := storetest.NewReference()
			r := portero.Rule{Algorithm: a, Limit: portero.Limit{Count: 120, Window: time.Second, Burst: 90}}
			l := limiter(t, s, r)
			hits := []portero.Hit{{Rule: r, Key: "k", Cost: 1}}
			at := storetest.Base
			for round, step := range []time.Duration{0, 137 * time.Millisecond, 1200 * time.Millisecond, 5 * time.Millisecond, 300 * time.Millisecond, -400 * time.Millisecond, 2 * time.Second} {
				at = at.Add(step)
				var mu sync.Mutex
				var got []portero.Decision
				var wg sync.WaitGroup
				start := make(chan struct{})
				for g := range goroutines {
					wg.Go(func() {
						<-start
						mine := make([]portero.Decision, 0, perRound)
						for range perRound {
							var d portero.Decision
							var err error
							if g%2 == 0 {
								d, err = l.AllowN(ctx, "k", at, 1)
							} else {
								var ds []portero.Decision
								if ds, err = s.AllowAll(ctx, at, hits); err == nil {
									d = ds[0]
								}
							}
							if err != nil {
								t.Error(err)
								return
							}
							mine = append(mine, d)
						}
						mu.Lock()
						got = append(got, mine...)
						mu.Unlock()
					})
				}
				close(start)
				wg.Wait()
				var want []portero.Decision
				for range goroutines * perRound {
					ds, err := ref.AllowAll(ctx, at, hits)
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, ds[0])
				}
				sortDecisions(got)
				sortDecisions(want)
				if !slices.Equal(got, want) {
					t.Fatalf("round %d at %v: the decisions differ from the Reference's:\ngot  %v\nwant %v", round, at.Sub(storetest.Base), got, want)
				}
			}
		})
	}
}

// Charges (Adjust) racing with decisions on one key at one instant lose
// nothing: with half the goroutines deciding and half charging, the key
// ends where the Reference ends after as many decisions and charges one
// after the other (all admitted: they stay within the limit), and the
// next decisions agree. For GCRA the decisions swap the word without the
// lock while Adjust changes it under the lock; an Adjust that stored its
// word instead of swapping it would lose the decisions that raced with it.
func TestConcurrentAdjustMatchesReference(t *testing.T) {
	ctx := context.Background()
	// Rounds on fresh keys: a lost update needs a decision to land between
	// Adjust's read and its write, which one round of 40,000 calls misses
	// now and then.
	const goroutines, perGoroutine, rounds = 8, 5000, 6
	for _, a := range []portero.Algorithm{portero.GCRA, portero.TokenBucket, portero.FixedWindow, portero.SlidingCounter} {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, memstore.Config{})
			ref := storetest.NewReference()
			r := portero.Rule{Name: "adj", Algorithm: a, Limit: portero.PerHour(goroutines*perGoroutine + 100)}
			l := limiter(t, s, r)
			now := storetest.Base
			for round := range rounds {
				key := fmt.Sprint("k", round)
				charge := []portero.Adjustment{{Rule: r, Key: key, Delta: 1, At: now}}
				var wg sync.WaitGroup
				start := make(chan struct{})
				for g := range goroutines {
					wg.Go(func() {
						<-start
						for range perGoroutine {
							if g%2 == 0 {
								if d, err := l.AllowN(ctx, key, now, 1); err != nil || !d.Allowed {
									t.Errorf("AllowN within the limit = %+v, %v", d, err)
									return
								}
							} else if err := s.Adjust(ctx, now, charge); err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
				close(start)
				wg.Wait()
				hits := []portero.Hit{{Rule: r, Key: key, Cost: 1}}
				for i := range goroutines * perGoroutine {
					if i%2 == 0 {
						if _, err := ref.AllowAll(ctx, now, hits); err != nil {
							t.Fatal(err)
						}
					} else if err := ref.Adjust(ctx, now, charge); err != nil {
						t.Fatal(err)
					}
				}
				// The 100 left, then a refusal.
				for _, cost := range []int64{100, 1} {
					got, err := l.AllowN(ctx, key, now, cost)
					if err != nil {
						t.Fatal(err)
					}
					want, err := ref.AllowAll(ctx, now, []portero.Hit{{Rule: r, Key: key, Cost: cost}})
					if err != nil {
						t.Fatal(err)
					}
					if got != want[0] {
						t.Fatalf("round %d: AllowN(cost %d) after %d decisions and charges = %+v, want %+v", round, cost, goroutines*perGoroutine, got, want[0])
					}
				}
			}
		})
	}
}

func sortDecisions(ds []portero.Decision) {
	slices.SortFunc(ds, func(a, b portero.Decision) int {
		return cmp.Or(cmp.Compare(a.Remaining, b.Remaining), cmp.Compare(a.Delay, b.Delay), cmp.Compare(a.RetryAfter, b.RetryAfter),
			cmp.Compare(a.ResetAfter, b.ResetAfter), cmp.Compare(btoi(a.Allowed), btoi(b.Allowed)))
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Lock-free decisions on known keys stay exact while another goroutine
// makes their shard's array be rebuilt over and over (new keys at the cap:
// an eviction and a tombstone each), sweeps and resets keys beside them:
// each hammered key admits exactly its burst at one instant. A rebuild that
// copied a state word without retiring it would lose the swaps that land
// on the old copy, and this test fails.
func TestLockFreeDuringRebuilds(t *testing.T) {
	ctx := context.Background()
	for _, a := range []portero.Algorithm{portero.GCRA, portero.LeakyQueue} {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, memstore.Config{Shards: 1, MaxKeys: 64, SweepInterval: -1})
			const hot, limit = 16, 3000
			r := portero.Rule{Algorithm: a, Limit: portero.Limit{Count: limit, Window: time.Hour}}
			l := limiter(t, s, r)
			now := storetest.Base
			var admitted [hot]atomic.Int64
			for k := range hot { // two each: less room than any new key, so never evicted
				for range 2 {
					if d, _ := l.AllowN(ctx, fmt.Sprint("hot", k), now, 1); d.Allowed {
						admitted[k].Add(1)
					}
				}
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 3 {
				wg.Go(func() {
					<-start
					for i := range 2 * limit * hot / 3 {
						k := (g + i) % hot
						if d, err := l.AllowN(ctx, fmt.Sprint("hot", k), now, 1); err == nil && d.Allowed {
							admitted[k].Add(1)
						}
					}
				})
			}
			wg.Go(func() {
				<-start
				for i := range 20_000 {
					l.AllowN(ctx, fmt.Sprint("new", i), now, 1)
					if i%500 == 0 {
						s.Sweep(now)
					}
					if i%7 == 0 {
						s.Reset(ctx, r, fmt.Sprint("new", i-3))
					}
				}
			})
			close(start)
			wg.Wait()
			for k := range hot {
				if got := admitted[k].Load(); got != limit {
					t.Errorf("hot%d: admitted %d, want %d", k, got, limit)
				}
			}
		})
	}
}

// A flood of 200,000 distinct addresses keeps the store at its cap, and the
// keys that were already limited stay limited.
func TestFloodBounded(t *testing.T) {
	ctx := context.Background()
	const maxKeys = 10_000
	for _, a := range portero.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t, memstore.Config{MaxKeys: maxKeys, SweepInterval: -1})
			rule := portero.Rule{Algorithm: a, Limit: portero.PerMinute(10)}
			l := limiter(t, s, rule)
			ref := storetest.NewReference()
			t0 := storetest.Base
			tracked := make([]string, 50)
			for i := range tracked {
				tracked[i] = fmt.Sprintf("tracked-%d", i)
				// Use up the limit: the state stays far from "full".
				if d, err := l.AllowN(ctx, tracked[i], t0, 10); err != nil || !d.Allowed {
					t.Fatalf("AllowN(%s, 10) = %+v, %v", tracked[i], d, err)
				}
				ref.AllowAll(ctx, t0, []portero.Hit{{Rule: rule, Key: tracked[i], Cost: 10}})
			}
			for i := range 200_000 {
				now := t0.Add(time.Duration(i) * 100 * time.Microsecond) // 20 s in all
				key := fmt.Sprintf("198.51.%d.%d", i/256, i%256)
				if _, err := l.AllowN(ctx, key, now, 1); err != nil {
					t.Fatal(err)
				}
				if i%10_000 == 9_999 {
					if n := s.Len(); n > maxKeys {
						t.Fatalf("after %d keys the store holds %d, cap %d", i+1, n, maxKeys)
					}
					k := tracked[i/10_000%len(tracked)]
					got, _ := l.AllowN(ctx, k, now, 1)
					want, _ := ref.AllowAll(ctx, now, []portero.Hit{{Rule: rule, Key: k, Cost: 1}})
					if got != want[0] {
						t.Fatalf("tracked key %s after %d flood keys:\n got %+v\nwant %+v", k, i+1, got, want[0])
					}
				}
			}
			if n := s.Len(); n > maxKeys || n < maxKeys/2 {
				t.Errorf("after the flood the store holds %d keys, want at most %d (and not nearly empty)", n, maxKeys)
			}
		})
	}
}

func TestSweep(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, memstore.Config{Shards: 4, SweepInterval: -1})
	t0 := storetest.Base
	for _, a := range portero.Algorithms {
		l := limiter(t, s, portero.Rule{Algorithm: a, Limit: portero.PerSecond(10)})
		for i := range 3000 {
			l.AllowN(ctx, fmt.Sprint(i), t0, 1)
		}
		for i := range 1000 {
			l.AllowN(ctx, fmt.Sprint("late", i), t0.Add(time.Hour), 1)
		}
	}
	all := 4000 * len(portero.Algorithms)
	if n := s.Len(); n != all {
		t.Fatalf("Len = %d, want %d", n, all)
	}
	if n := s.Sweep(t0); n != 0 {
		t.Errorf("Sweep at the first instant dropped %d", n)
	}
	if n := s.Sweep(t0.Add(time.Minute)); n != 3000*len(portero.Algorithms) {
		t.Errorf("Sweep a minute later dropped %d, want %d", n, 3000*len(portero.Algorithms))
	}
	if n := s.Len(); n != 1000*len(portero.Algorithms) {
		t.Errorf("Len after the sweep = %d, want %d", n, 1000*len(portero.Algorithms))
	}
	// The keys left still decide as before.
	l := limiter(t, s, portero.Rule{Algorithm: portero.FixedWindowAnchored, Limit: portero.PerSecond(10)})
	if d, _ := l.AllowN(ctx, "late1", t0.Add(time.Hour), 1); d.Remaining != 8 {
		t.Errorf("a kept key after the sweep: %+v, want Remaining 8", d)
	}
	s.Sweep(t0.Add(2 * time.Hour))
	if n := s.Len(); n != 0 {
		t.Errorf("Len after sweeping everything = %d", n)
	}
}

func TestSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s, err := memstore.New(memstore.Config{SweepInterval: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		l := limiter(t, s, portero.Rule{Algorithm: portero.GCRA, Limit: portero.PerSecond(1)})
		for i := range 100 {
			l.Allow(ctx, fmt.Sprint(i))
		}
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if n := s.Len(); n != 100 {
			t.Fatalf("Len before the first sweep = %d, want 100", n)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := s.Len(); n != 0 {
			t.Errorf("Len after the sweeper ran = %d, want 0", n)
		}
	})
}

// A queue of 6 places: 9 arrivals into 6 places drained 2/s depart at
// 0.5 … 3.0 s; 3 are dropped.
func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		l := limiter(t, s, portero.Rule{Algorithm: portero.LeakyQueue, Limit: portero.PerSecond(2).WithBurst(6)})
		start := time.Now()
		var mu sync.Mutex
		var departed []time.Duration
		dropped := 0
		var wg sync.WaitGroup
		for range 9 {
			wg.Go(func() {
				err := l.Wait(ctx, "k")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					departed = append(departed, time.Since(start))
				case errors.Is(err, memstore.ErrQueueFull):
					dropped++
				default:
					t.Errorf("Wait = %v", err)
				}
			})
			synctest.Wait() // one at a time, so the order is fixed
		}
		wg.Wait()
		want := []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond, 3 * time.Second}
		if fmt.Sprint(departed) != fmt.Sprint(want) || dropped != 3 {
			t.Errorf("departures %v and %d dropped, want %v and 3", departed, dropped, want)
		}
	})
}

func TestWaitCancelGivesPlaceBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		l := limiter(t, s, portero.Rule{Algorithm: portero.LeakyQueue, Limit: portero.PerSecond(2).WithBurst(6)})
		remaining := func() int64 {
			t.Helper()
			// A cost-6 probe is refused without counting; its Remaining
			// is the free places.
			d, err := l.AllowN(ctx, "k", time.Now(), 6)
			if err != nil || d.Allowed {
				t.Fatalf("probe = %+v, %v", d, err)
			}
			return d.Remaining
		}
		if err := l.WaitN(ctx, "k", 2); err != nil { // sleeps 1 s; the queue is empty again
			t.Fatal(err)
		}
		go l.Wait(ctx, "k") // departs at 0.5 s from now and stays
		synctest.Wait()
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error)
		go func() { errc <- l.WaitN(cctx, "k", 3) }() // last: departs at 2 s
		synctest.Wait()
		if r := remaining(); r != 2 {
			t.Fatalf("free places with 4 queued = %d, want 2", r)
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Wait = %v, want context.Canceled", err)
		}
		if r := remaining(); r != 5 {
			t.Errorf("free places after the last reservation gave up = %d, want 5", r)
		}

		// Not the last one: its places come back all the same, and the one
		// queued behind it keeps its departure.
		cctx, cancel = context.WithCancel(ctx)
		go func() { errc <- l.WaitN(cctx, "k", 2) }()
		synctest.Wait()
		behind := make(chan time.Time)
		go func() { l.Wait(ctx, "k"); behind <- time.Now() }()
		synctest.Wait()
		before, t1 := remaining(), time.Now()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Wait = %v", err)
		}
		if r := remaining(); r != before+2 {
			t.Errorf("free places after a middle reservation gave up = %d, want %d", r, before+2)
		}
		// What is left of the first Wait's place (0.4 s), the 2 given
		// back, then its own: as it was told when it queued.
		if got := (<-behind).Sub(t1); got != 1900*time.Millisecond {
			t.Errorf("the request behind departed after %v, want its 1.9s", got)
		}

		// A deadline before the departure returns at once, taking nothing.
		time.Sleep(10 * time.Second)
		dctx, dcancel := context.WithTimeout(ctx, 700*time.Millisecond)
		defer dcancel()
		l.Wait(ctx, "k") // 0.5 s, now empty
		go l.Wait(ctx, "k")
		synctest.Wait()
		t0 := time.Now()
		if err := l.WaitN(dctx, "k", 1); !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) != 0 {
			t.Errorf("Wait past the deadline = %v after %v, want DeadlineExceeded at once", err, time.Since(t0))
		}
		if r := remaining(); r != 5 {
			t.Errorf("free places after a Wait past its deadline = %d, want 5", r)
		}

		// Close wakes the waiters.
		time.Sleep(10 * time.Second)
		go func() { errc <- l.WaitN(ctx, "k", 6) }()
		synctest.Wait()
		s.Close(ctx)
		if err := <-errc; !errors.Is(err, portero.ErrClosed) {
			t.Errorf("Wait when the store closed = %v, want ErrClosed", err)
		}
	})
}

// With the sweeper off, state that has returned to full is still dropped
// when a full shard needs room, before any key that holds information.
func TestExpiredDroppedOnInsert(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, memstore.Config{Shards: 1, MaxKeys: 100, SweepInterval: -1})
	l := limiter(t, s, portero.Rule{Algorithm: portero.TokenBucket, Limit: portero.PerSecond(10)})
	t0 := storetest.Base
	if d, _ := l.AllowN(ctx, "limited", t0, 10); !d.Allowed {
		t.Fatal("first use refused")
	}
	for i := range 99 {
		l.AllowN(ctx, fmt.Sprint("old", i), t0, 1) // full again 0.1 s later
	}
	if n := s.Len(); n != 100 {
		t.Fatalf("Len = %d, want 100", n)
	}
	t1 := t0.Add(500 * time.Millisecond) // "limited" has 5 of 10 back; the rest are full
	for i := range 99 {
		l.AllowN(ctx, fmt.Sprint("new", i), t1, 1)
	}
	if n := s.Len(); n > 100 {
		t.Errorf("Len = %d, over the cap of 100", n)
	}
	if d, _ := l.AllowN(ctx, "limited", t1, 6); d.Allowed || d.Remaining != 5 {
		t.Errorf("the key with state was dropped: cost 6 with 5 tokens = %+v", d)
	}
}

// An AllowAll call that inserts a new key can rebuild the shard's array;
// the states it found for the call's other keys must still be written to
// the new array. Every call here pairs a new key with a known one (in that
// order, so the insert comes first) in a one-shard store, for a two-word and a one-word algorithm, and must decide
// as the Reference does.
func TestAllowAllAcrossRebuilds(t *testing.T) {
	for _, a := range []portero.Algorithm{portero.TokenBucket, portero.GCRA, portero.FixedWindowAnchored} {
		t.Run(string(a), func(t *testing.T) {
			r := portero.Rule{Algorithm: a, Limit: portero.Limit{Count: 150, Window: time.Hour}}
			var trace []storetest.Trace
			for i := range 300 {
				trace = append(trace, storetest.Trace{At: time.Duration(i) * time.Millisecond, Hits: []portero.Hit{
					{Rule: r, Key: fmt.Sprint("new", i), Cost: 1}, {Rule: r, Key: "old", Cost: 1},
				}})
			}
			storetest.CompareTrace(t, newStore(t, memstore.Config{Shards: 1, SweepInterval: -1}), storetest.NewReference(), trace)
		})
	}
}
