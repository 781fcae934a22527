package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// AdjustStep is one step of an adjustment table: at At after Base, either a
// request of Cost (Adjust zero) with the expected Allowed and Remaining, or
// an adjustment of Adjust units refunding the decision made at Reserved
// after Base (no expectation: the requests that follow show its effect).
type AdjustStep struct {
	At       time.Duration
	Cost     int64
	Adjust   int64
	Reserved time.Duration
	Allowed  bool
	Remain   int64
}

// AdjustTable is a named list of steps on one rule and key.
type AdjustTable struct {
	Name  string
	Rule  portero.Rule
	Steps []AdjustStep
}

// AdjustTables returns the worked examples of settlement, each derived by
// hand in its comments.
func AdjustTables() []AdjustTable {
	fw := portero.Rule{Name: "fw", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 10, Window: time.Minute}}
	tb := portero.Rule{Name: "tb", Algorithm: portero.TokenBucket, Limit: portero.Limit{Count: 10, Window: 10 * time.Second}} // 1/s, burst 10
	sl := portero.Rule{Name: "sl", Algorithm: portero.SlidingLog, Limit: portero.Limit{Count: 3, Window: 10 * time.Second}}
	sc := portero.Rule{Name: "sc", Algorithm: portero.SlidingCounter, Limit: portero.Limit{Count: 10, Window: time.Minute}}
	gc := portero.Rule{Name: "gcra", Algorithm: portero.GCRA, Limit: portero.Limit{Count: 10, Window: 10 * time.Second}}
	q := portero.Rule{Name: "q", Algorithm: portero.LeakyQueue, Limit: portero.PerSecond(2).WithBurst(5)} // 5 places, one departs every 0.5 s
	return []AdjustTable{
		{"fixed-window/refund-and-charge", fw, []AdjustStep{
			{At: 0, Cost: 8, Allowed: true, Remain: 2},       // a reservation of 8
			{At: sec(1), Adjust: -6, Reserved: 0},            // it used 2: 6 back
			{At: sec(2), Cost: 1, Allowed: true, Remain: 7},  // 2 + 1 used
			{At: sec(3), Adjust: 30},                         // a charge of 30: capped at 2L = 20 used
			{At: sec(4), Cost: 1, Allowed: false, Remain: 0}, // over the limit until the window ends
			{At: sec(60), Cost: 1, Allowed: true, Remain: 9}, // the next window is whole
			{At: sec(61), Adjust: -5, Reserved: sec(59)},     // a refund of the old window: nothing
			{At: sec(62), Cost: 9, Allowed: true, Remain: 0}, // 1 + 9
		}},
		{"token-bucket/debt", tb, []AdjustStep{
			{At: 0, Cost: 10, Allowed: true, Remain: 0},       // the whole burst
			{At: 0, Adjust: -4, Reserved: 0},                  // 4 back
			{At: 0, Cost: 4, Allowed: true, Remain: 0},        // and spent again
			{At: sec(2), Adjust: 12},                          // 2 refilled, 12 charged: 10 owed (capped at −B)
			{At: sec(11), Cost: 1, Allowed: false, Remain: 0}, // 9 s repaid 9 of the 10 owed
			{At: sec(12), Cost: 1, Allowed: false, Remain: 0}, // the debt is paid, no whole token yet
			{At: sec(13), Cost: 1, Allowed: true, Remain: 0},  // one token, spent
			{At: sec(13), Adjust: -100, Reserved: sec(13)},    // a refund fills at most the burst
			{At: sec(13), Cost: 10, Allowed: true, Remain: 0},
		}},
		{"gcra/refund", gc, []AdjustStep{
			{At: 0, Cost: 6, Allowed: true, Remain: 4},
			{At: 0, Adjust: -6, Reserved: 0},
			{At: 0, Cost: 10, Allowed: true, Remain: 0},
			{At: 0, Adjust: 5},                               // TAT 15 s ahead
			{At: sec(5), Cost: 1, Allowed: false, Remain: 0}, // level 10 s: no room
			{At: sec(6), Cost: 1, Allowed: true, Remain: 0},  // level 9 s: one fits
		}},
		{"sliding-counter/previous-window", sc, []AdjustStep{
			{At: sec(50), Cost: 10, Allowed: true, Remain: 0},
			{At: sec(60), Adjust: -10, Reserved: sec(50)}, // counted in the previous window: taken from prev
			{At: sec(60), Cost: 10, Allowed: true, Remain: 0},
		}},
		{"leaky-queue/places-given-back", q, []AdjustStep{
			{At: 0, Cost: 1, Allowed: true, Remain: 4}, // departs at 0.5 s
			{At: 0, Cost: 1, Allowed: true, Remain: 3}, // 1.0 s
			{At: 0, Cost: 1, Allowed: true, Remain: 2}, // 1.5 s
			{At: sec(0.2), Adjust: -1, Reserved: 0},    // one leaves: the end moves back to 1.0 s
			{At: sec(0.2), Cost: 1, Allowed: true, Remain: 2},
			{At: sec(0.2), Adjust: -9, Reserved: 0},           // more than is queued: the queue is empty, not below now
			{At: sec(0.2), Cost: 5, Allowed: true, Remain: 0}, // the 5 places, until 2.7 s
			{At: sec(2.7), Cost: 5, Allowed: true, Remain: 0}, // empty again: 5 more, until 5.2 s
			{At: sec(2.7), Adjust: -1, Reserved: sec(0.2)},    // a place taken 5 intervals ago has departed: nothing
			{At: sec(2.7), Cost: 1, Allowed: false, Remain: 0},
			{At: sec(2.7), Adjust: -2, Reserved: sec(2.7)},    // two of the 5 leave: the end moves to 4.2 s
			{At: sec(2.7), Cost: 2, Allowed: true, Remain: 0}, // 3 taken, and these 2
		}},
		{"sliding-log/charge", sl, []AdjustStep{
			{At: 0, Cost: 1, Allowed: true, Remain: 2},
			{At: sec(1), Adjust: 5}, // logged at 1 s; beyond L the oldest go
			{At: sec(2), Cost: 1, Allowed: false, Remain: 0},
			{At: sec(11) - time.Microsecond, Cost: 1, Allowed: false, Remain: 0},
			{At: sec(11), Cost: 1, Allowed: true, Remain: 2}, // every entry logged at 1 s expired
		}},
	}
}

func runAdjust(t *testing.T, newStore func(t *testing.T) portero.Store) {
	ctx := context.Background()
	adjuster := func(t *testing.T) (portero.Store, portero.Adjuster) { return as[portero.Adjuster](t, newStore(t)) }
	t.Run("steps", func(t *testing.T) {
		for _, tab := range AdjustTables() {
			t.Run(tab.Name, func(t *testing.T) {
				s, a := adjuster(t)
				for i, st := range tab.Steps {
					now := Base.Add(st.At)
					if st.Adjust != 0 {
						if err := a.Adjust(ctx, now, []portero.Adjustment{{Rule: tab.Rule, Key: "k", Delta: st.Adjust, At: Base.Add(st.Reserved)}}); err != nil {
							t.Fatalf("step %d: Adjust(%d) = %v", i, st.Adjust, err)
						}
						continue
					}
					d, err := s.AllowAll(ctx, now, []portero.Hit{{Rule: tab.Rule, Key: "k", Cost: st.Cost}})
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if d[0].Allowed != st.Allowed || d[0].Remaining != st.Remain {
						t.Errorf("step %d at %v: cost %d = allowed %v remaining %d, want %v %d", i, st.At, st.Cost, d[0].Allowed, d[0].Remaining, st.Allowed, st.Remain)
					}
				}
			})
		}
	})
	t.Run("random", func(t *testing.T) {
		for _, alg := range portero.Algorithms {
			charge, refund := algorithm.CanAdjust(alg)
			if !charge && !refund {
				continue
			}
			t.Run(string(alg), func(t *testing.T) {
				rules := rulesOf(alg)
				got, ga := adjuster(t)
				want := NewReference()
				rnd := rand.New(rand.NewPCG(uint64(len(alg)), 77))
				var decided []time.Duration // instants of earlier calls, to refund
				for i, c := range RandomTrace(uint64(len(alg))*13+5, rules, 600, false) {
					now := Base.Add(c.At)
					if rnd.IntN(3) == 0 && (charge || len(decided) > 0) {
						var adj []portero.Adjustment
						for _, h := range c.Hits {
							delta := 1 + rnd.Int64N(2*h.Rule.Limit.Capacity())
							at := now
							if refund && len(decided) > 0 && (!charge || rnd.IntN(2) == 0) {
								delta = -delta
								at = Base.Add(decided[rnd.IntN(len(decided))])
							}
							adj = append(adj, portero.Adjustment{Rule: h.Rule, Key: h.Key, Delta: delta, At: at})
						}
						gerr, werr := ga.Adjust(ctx, now, adj), want.Adjust(ctx, now, adj)
						if gerr != nil || werr != nil {
							t.Fatalf("call %d: Adjust(%v) = %v, reference %v", i, adj, gerr, werr)
						}
						for _, h := range c.Hits {
							g, gerr := got.Peek(ctx, h.Rule, h.Key, now, h.Cost)
							w, werr := want.Peek(ctx, h.Rule, h.Key, now, h.Cost)
							if gerr != nil || werr != nil || g != w {
								t.Fatalf("call %d after %v: Peek(%s, %q) = %+v, %v; want %+v, %v", i, adj, h.Rule.Name, h.Key, g, gerr, w, werr)
							}
						}
					}
					CompareTrace(t, got, want, []Trace{c})
					decided = append(decided, c.At)
				}
			})
		}
	})
	t.Run("not-adjustable", func(t *testing.T) {
		s, a := adjuster(t)
		q := portero.Rule{Name: "q", Algorithm: portero.LeakyQueue, Limit: portero.Limit{Count: 2, Window: time.Second}}
		log := portero.Rule{Name: "log", Algorithm: portero.SlidingLog, Limit: portero.Limit{Count: 2, Window: time.Second}}
		fw := portero.Rule{Name: "fw", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 2, Window: time.Second}}
		for _, bad := range []portero.Adjustment{{Rule: q, Key: "k", Delta: 1}, {Rule: log, Key: "k", Delta: -1}} {
			// The good adjustment first: the call fails whole, before it.
			err := a.Adjust(ctx, Base, []portero.Adjustment{{Rule: fw, Key: "k", Delta: 2}, bad})
			if !errors.Is(err, portero.ErrNotAdjustable) {
				t.Errorf("Adjust(%s, %d) = %v, want ErrNotAdjustable", bad.Rule.Algorithm, bad.Delta, err)
			}
		}
		d, err := s.Peek(ctx, fw, "k", Base, 1)
		if err != nil || !d.Allowed || d.Remaining != 2 || d.ResetAfter != 0 {
			t.Errorf("after refused adjustments, Peek = %+v, %v; want the rule untouched (2 left, whole)", d, err)
		}
	})
}
