package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

var _ portero.Taker = (*Reference)(nil)

// Take implements portero.Taker with algorithm.Take: the oracle of the
// take tables and traces.
func (r *Reference) Take(_ context.Context, now time.Time, rule portero.Rule, key string, need, want int64) (int64, portero.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, portero.Decision{}, fmt.Errorf("storetest: reference store: %w", portero.ErrClosed)
	}
	d, err := newDeciders(rule)
	if err != nil {
		return 0, portero.Decision{}, err
	}
	if err := algorithm.CheckTake(rule, need, want, d.maxCost()); err != nil {
		return 0, portero.Decision{}, err
	}
	k := refKey{rule, key}
	s, found := r.states[k]
	s, took, dec := algorithm.Take(d.fixed, s, found, now.UnixNano(), need, want)
	if took > 0 {
		r.states[k] = s
	}
	return took, dec, nil
}

// TakeStep is one step of a take table: at At after Base, a take of Need
// to Want units (Want zero: a request of cost Need) and what it gets: Took
// units (1 for an admitted request), with Remaining left.
type TakeStep struct {
	At         time.Duration
	Need, Want int64
	Took       int64
	Remaining  int64
	RetryAfter time.Duration
}

// TakeTable is a named list of steps on one rule and key.
type TakeTable struct {
	Name  string
	Rule  portero.Rule
	Steps []TakeStep
}

// TakeTables returns the worked examples of taking budgets, each derived
// by hand in its comments.
func TakeTables() []TakeTable {
	fw := portero.Rule{Name: "fw", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 100, Window: time.Minute}}
	an := portero.Rule{Name: "an", Algorithm: portero.FixedWindowAnchored, Limit: portero.Limit{Count: 20, Window: 10 * time.Second}}
	tb := portero.Rule{Name: "tb", Algorithm: portero.TokenBucket, Limit: portero.Limit{Count: 80, Window: 8 * time.Second}} // 10/s, burst 80
	gc := portero.Rule{Name: "gcra", Algorithm: portero.GCRA, Limit: portero.Limit{Count: 80, Window: 8 * time.Second}}
	lm := portero.Rule{Name: "lm", Algorithm: portero.LeakyMeter, Limit: portero.Limit{Count: 80, Window: 8 * time.Second}}
	q := portero.Rule{Name: "q", Algorithm: portero.FixedWindow, Limit: portero.PerDay(40)}
	bucket := func(r portero.Rule) []TakeStep {
		return []TakeStep{
			{At: 0, Need: 1, Want: 50, Took: 10, Remaining: 70},                         // full: 80/8 = 10
			{At: 0, Need: 20, Want: 30, Took: 20, Remaining: 50},                        // 70/8 = 8 < need: need
			{At: 0, Need: 1, Want: 3, Took: 3, Remaining: 47},                           // 50/8 = 6 > want: want
			{At: 0, Need: 40, Want: 40, Took: 40, Remaining: 7},                         // 47 ≥ 40
			{At: 0, Need: 8, Want: 9, Took: 0, Remaining: 7, RetryAfter: sec(0.1)},      // 7 < 8: nothing; 1 more in 0.1 s
			{At: sec(1), Need: 1, Want: 100, Took: 2, Remaining: 15},                    // 7 + 10 refilled = 17, 17/8 = 2
			{At: sec(1), Need: 1, Want: 0, Took: 1, Remaining: 14},                      // a request takes from the same bucket
			{At: sec(2.5), Need: 1, Want: 1, Took: 1, Remaining: 28},                    // 14 + 15
			{At: sec(9), Need: 80, Want: 80, Took: 80, Remaining: 0},                    // full again: all of it
			{At: sec(9), Need: 1, Want: 1, Took: 0, Remaining: 0, RetryAfter: sec(0.1)}, // empty
		}
	}
	return []TakeTable{
		{"fixed-window/shrinking", fw, []TakeStep{
			{At: 0, Need: 1, Want: 40, Took: 12, Remaining: 88},                        // 100/8 = 12
			{At: sec(1), Need: 1, Want: 40, Took: 11, Remaining: 77},                   // 88/8 = 11
			{At: sec(2), Need: 1, Want: 0, Took: 1, Remaining: 76},                     // a request in the same window
			{At: sec(3), Need: 5, Want: 5, Took: 5, Remaining: 71},                     // want = need
			{At: sec(4), Need: 70, Want: 100, Took: 70, Remaining: 1},                  // 71/8 = 8 < need
			{At: sec(5), Need: 1, Want: 9, Took: 1, Remaining: 0},                      // 1/8 = 0: the need
			{At: sec(6), Need: 1, Want: 9, Took: 0, Remaining: 0, RetryAfter: sec(54)}, // spent until the window ends
			{At: sec(60), Need: 1, Want: 1000, Took: 12, Remaining: 88},                // the next window: 100/8
		}},
		{"fixed-window-anchored/within-its-window", an, []TakeStep{
			{At: sec(3), Need: 1, Want: 20, Took: 2, Remaining: 18},                   // the window starts at 3 s: 20/8 = 2
			{At: sec(4), Need: 18, Want: 18, Took: 18, Remaining: 0},                  // the rest
			{At: sec(5), Need: 1, Want: 1, Took: 0, Remaining: 0, RetryAfter: sec(8)}, // until 13 s
			{At: sec(13), Need: 4, Want: 4, Took: 4, Remaining: 16},                   // a new window from 13 s
		}},
		{"token-bucket/taken-at-once", tb, bucket(tb)},
		{"gcra/taken-at-once", gc, bucket(gc)},
		{"leaky-meter/taken-at-once", lm, bucket(lm)},
		{"calendar/quota", q, []TakeStep{
			{At: 0, Need: 1, Want: 40, Took: 5, Remaining: 35},                                      // 40/8
			{At: sec(1), Need: 35, Want: 35, Took: 35, Remaining: 0},                                // the day's rest
			{At: sec(2), Need: 1, Want: 1, Took: 0, Remaining: 0, RetryAfter: 2*time.Hour - sec(2)}, // Base is 22:00 UTC: the next day in 2 h
		}},
	}
}

// RunTake runs the take tables and random traces of takes, requests and
// refunds against the stores newStore returns, which must implement
// portero.Taker and portero.Adjuster, comparing them with Reference.
func RunTake(t *testing.T, newStore func(t *testing.T) portero.Store) {
	ctx := context.Background()
	taker := func(t *testing.T) (portero.Store, portero.Taker) { return as[portero.Taker](t, newStore(t)) }
	t.Run("steps", func(t *testing.T) {
		for _, tab := range TakeTables() {
			t.Run(tab.Name, func(t *testing.T) {
				s, tk := taker(t)
				for i, st := range tab.Steps {
					now := Base.Add(st.At)
					var took int64
					var d portero.Decision
					var err error
					if st.Want == 0 {
						var ds []portero.Decision
						ds, err = s.AllowAll(ctx, now, []portero.Hit{{Rule: tab.Rule, Key: "k", Cost: st.Need}})
						if err == nil {
							d = ds[0]
							if d.Allowed {
								took = 1
							}
						}
					} else {
						took, d, err = tk.Take(ctx, now, tab.Rule, "k", st.Need, st.Want)
					}
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if took != st.Took || d.Remaining != st.Remaining || d.RetryAfter != st.RetryAfter || d.Allowed != (took > 0) {
						t.Errorf("step %d at %v: take %d..%d = %d, %+v; want %d, remaining %d, retry after %v",
							i, st.At, st.Need, st.Want, took, d, st.Took, st.Remaining, st.RetryAfter)
					}
				}
			})
		}
	})
	t.Run("random", func(t *testing.T) {
		for _, alg := range portero.Algorithms {
			if !portero.Leasable(alg) {
				continue
			}
			rules := rulesOf(alg)
			if alg == portero.FixedWindow {
				rules = append(rules, CalendarRules()[2])
			}
			t.Run(string(alg), func(t *testing.T) { takeTrace(t, newStore, rules, uint64(len(alg))*17+3) })
		}
	})
	t.Run("errors", func(t *testing.T) {
		_, tk := taker(t)
		log := portero.Rule{Name: "log", Algorithm: portero.SlidingLog, Limit: portero.PerSecond(5)}
		fw := portero.Rule{Name: "fw", Algorithm: portero.FixedWindow, Limit: portero.PerSecond(5)}
		for _, c := range []struct {
			rule       portero.Rule
			need, want int64
			err        error
		}{
			{log, 1, 2, portero.ErrInvalidLimit},
			{fw, 0, 2, portero.ErrInvalidCost},
			{fw, 6, 6, portero.ErrCostExceedsLimit},
			{fw, 3, 2, portero.ErrInvalidCost},
		} {
			if _, _, err := tk.Take(ctx, Base, c.rule, "k", c.need, c.want); !errors.Is(err, c.err) {
				t.Errorf("Take(%s, %d, %d) = %v, want %v", c.rule.Algorithm, c.need, c.want, err, c.err)
			}
		}
	})
}

// as returns s and s as a T, or fails the test when s is no T.
func as[T any](t *testing.T, s portero.Store) (portero.Store, T) {
	t.Helper()
	v, ok := s.(T)
	if !ok {
		t.Fatalf("%T does not implement %v", s, reflect.TypeFor[T]())
	}
	return s, v
}

// takeTrace replays a random trace (of a fixed seed) on a fresh store and on
// Reference: requests (RandomTrace's calls), takes of random sizes, and
// refunds of earlier takes, comparing every take, and the state after
// each refund.
func takeTrace(t *testing.T, newStore func(t *testing.T) portero.Store, rules []portero.Rule, seed uint64) {
	ctx := context.Background()
	got := newStore(t)
	gt, ga := got.(portero.Taker), got.(portero.Adjuster)
	want := NewReference()
	rnd := rand.New(rand.NewPCG(seed, 5))
	type taken struct {
		rule portero.Rule
		key  string
		n    int64
		at   time.Time
	}
	var takes []taken
	for i, c := range RandomTrace(seed, rules, 800, true) {
		now := Base.Add(c.At)
		h := c.Hits[0]
		switch rnd.IntN(3) {
		case 0:
			need := 1 + rnd.Int64N(limitOf(h.Rule))
			w := need + rnd.Int64N(2*limitOf(h.Rule))
			gk, gd, gerr := gt.Take(ctx, now, h.Rule, h.Key, need, w)
			wk, wd, werr := want.Take(ctx, now, h.Rule, h.Key, need, w)
			if gk != wk || gd != wd || (gerr == nil) != (werr == nil) {
				t.Fatalf("call %d at %v: Take(%s, %q, %d, %d) = %d, %+v, %v; want %d, %+v, %v", i, c.At, h.Rule.Name, h.Key, need, w, gk, gd, gerr, wk, wd, werr)
			}
			if gk > 0 {
				takes = append(takes, taken{h.Rule, h.Key, gk, now})
			}
		case 1:
			if len(takes) == 0 {
				continue
			}
			tk := takes[rnd.IntN(len(takes))]
			back := 1 + rnd.Int64N(tk.n)
			adj := []portero.Adjustment{{Rule: tk.rule, Key: tk.key, Delta: -back, At: tk.at}}
			if gerr, werr := ga.Adjust(ctx, now, adj), want.Adjust(ctx, now, adj); gerr != nil || werr != nil {
				t.Fatalf("call %d: Adjust(%v) = %v, reference %v", i, adj, gerr, werr)
			}
			g, gerr := got.Peek(ctx, tk.rule, tk.key, now, 1)
			w, werr := want.Peek(ctx, tk.rule, tk.key, now, 1)
			if gerr != nil || werr != nil || g != w {
				t.Fatalf("call %d after %v: Peek = %+v, %v; want %+v, %v", i, adj, g, gerr, w, werr)
			}
		default:
			CompareTrace(t, got, want, []Trace{c})
		}
	}
}
