// Package storetest is the conformance suite every portero.Store must
// pass, and Reference, the plain store it compares them with.
//
// A store's tests call Run with a constructor that returns an empty store
// and closes it in t.Cleanup (a second Close must be harmless: one subtest
// closes its store itself):
//
//	storetest.Run(t, func(t *testing.T) portero.Store {
//		s, err := memstore.New(memstore.Config{})
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(func() { s.Close(context.Background()) })
//		return s
//	})
//
// The suite checks step tables worked by hand for every algorithm (time
// going backwards too); seeded random traces whose decisions must equal
// Reference's; all-or-nothing across rules; the errors and ErrClosed;
// Peek, which must count nothing and say what the next call decides;
// calendar quotas; and Adjust (portero.Adjuster): step tables and random
// traces of charges and refunds, and ErrNotAdjustable checked before
// anything changes. RunLeases does the same for concurrency leases.
//
// Every instant is a whole number of microseconds after Base, itself a
// whole number of hours since the Unix epoch, so that clock-aligned
// windows start where the tables say and a store that keeps time in
// microseconds (Redis) passes unchanged.
package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/portero-rl/portero"
)

// Base is the instant the step tables count from: 2023-11-14 22:00:00 UTC,
// a whole number of hours (and so of minutes, 10 s and seconds) since the
// Unix epoch.
var Base = time.Unix(1_699_999_200, 0)

// Run runs the conformance suite against the stores newStore returns, one
// fresh store per subtest. newStore must arrange for the store to be closed
// (t.Cleanup); Run may also close it, and a second Close must not panic.
func Run(t *testing.T, newStore func(t *testing.T) portero.Store) {
	t.Helper()
	t.Run("steps", func(t *testing.T) { runSteps(t, newStore) })
	t.Run("random", func(t *testing.T) { runRandom(t, newStore) })
	t.Run("all-or-nothing", func(t *testing.T) { runAllOrNothing(t, newStore) })
	t.Run("errors", func(t *testing.T) { runErrors(t, newStore) })
	t.Run("calendar", func(t *testing.T) { runCalendar(t, newStore) })
	t.Run("peek", func(t *testing.T) { runPeek(t, newStore) })
	t.Run("adjust", func(t *testing.T) { runAdjust(t, newStore) })
}

// Step is one request of a step table: at At after Base, the hit's Cost
// (1 when zero) and MaxDelay on Key ("k" when empty), and the decision
// expected.
// ResetAfter is checked only when CheckReset is set; PeriodLeft (and Quota)
// always for a calendar quota, never otherwise.
type Step struct {
	At         time.Duration
	Key        string
	Cost       int64
	MaxDelay   time.Duration
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	Delay      time.Duration
	ResetAfter time.Duration
	CheckReset bool
	PeriodLeft time.Duration
	Note       string
}

// Table is a step table for one rule.
type Table struct {
	Name  string
	Rule  portero.Rule
	Steps []Step
}

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

// Tables returns the step tables, at least one for every algorithm in
// portero.Algorithms. The expected values are worked by hand (see Note and
// the comments).
func Tables() []Table {
	tables := slices.Concat(windowTables(), slidingCounterTables(), bucketTables(), queueTables())
	return append(tables, CalendarTables()...)
}

func rule(alg portero.Algorithm, l portero.Limit) portero.Rule {
	return portero.Rule{Name: string(alg), Algorithm: alg, Limit: l}
}

// windowTables are the tables of the fixed windows and the sliding log.
func windowTables() []Table {
	return []Table{
		{
			Name: "fixed-window W=10s: an instant at exactly 10 s belongs to the new window",
			Rule: rule(portero.FixedWindow, portero.Limit{Count: 3, Window: 10 * time.Second}),
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: 2, ResetAfter: sec(10), CheckReset: true},
				{At: sec(1), Allowed: true, Remaining: 1},
				{At: sec(2), Allowed: true, Remaining: 0, ResetAfter: sec(8), CheckReset: true},
				{At: sec(3), Remaining: 0, RetryAfter: sec(7)},
				{At: sec(10) - time.Microsecond, Remaining: 0, RetryAfter: time.Microsecond, Note: "last instant of [0,10)"},
				{At: sec(10), Allowed: true, Remaining: 2, ResetAfter: sec(10), CheckReset: true, Note: "first instant of [10,20)"},
				{At: sec(25), Cost: 3, Allowed: true, Remaining: 0, ResetAfter: sec(5), CheckReset: true},
				{At: sec(25), Remaining: 0, RetryAfter: sec(5)},
				{At: sec(15), Remaining: 0, RetryAfter: sec(15), Note: "time went back to [10,20): the window [20,30) stands"},
				{At: sec(25), Key: "other", Allowed: true, Remaining: 2, Note: "keys are independent"},
				{At: sec(30), Cost: 3, Allowed: true, Remaining: 0},
			},
		},
		{
			Name: "fixed-window-anchored W=10s starts at the first request",
			Rule: rule(portero.FixedWindowAnchored, portero.Limit{Count: 2, Window: 10 * time.Second}),
			Steps: []Step{
				{At: sec(3), Allowed: true, Remaining: 1, ResetAfter: sec(10), CheckReset: true},
				{At: sec(5), Allowed: true, Remaining: 0, ResetAfter: sec(8), CheckReset: true},
				{At: ms(12500), Remaining: 0, RetryAfter: ms(500), Note: "the window is [3,13)"},
				{At: sec(13), Allowed: true, Remaining: 1, ResetAfter: sec(10), CheckReset: true, Note: "a new window [13,23)"},
				{At: sec(8), Allowed: true, Remaining: 0, ResetAfter: sec(15), CheckReset: true, Note: "time went back: still the window [13,23)"},
				{At: sec(14), Remaining: 0, RetryAfter: sec(9)},
			},
		},
		{
			Name: "sliding-log L=3 W=10s: an entry exactly W old has expired",
			Rule: rule(portero.SlidingLog, portero.Limit{Count: 3, Window: 10 * time.Second}),
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: 2, ResetAfter: sec(10), CheckReset: true},
				{At: sec(1), Allowed: true, Remaining: 1},
				{At: sec(2), Allowed: true, Remaining: 0, ResetAfter: sec(10), CheckReset: true},
				{At: sec(5), Remaining: 0, RetryAfter: sec(5), ResetAfter: sec(7), CheckReset: true, Note: "the entry at 0 leaves at 10"},
				{At: sec(10), Allowed: true, Remaining: 0, Note: "(0,10]: the entry at 0 has expired"},
				{At: ms(10500), Remaining: 0, RetryAfter: ms(500)},
				{At: sec(12), Cost: 2, Allowed: true, Remaining: 0, Note: "entries at 1 and 2 expired"},
				{At: sec(11), Remaining: 0, RetryAfter: sec(9), Note: "time went back: 12 stands, the entry at 10 leaves at 20, 9 s after the caller's 11 s"},
				{At: sec(22), Cost: 3, Allowed: true, Remaining: 0, ResetAfter: sec(10), CheckReset: true},
			},
		},
	}
}

// slidingCounterTables are the sliding counter's tables.
func slidingCounterTables() []Table {
	return []Table{
		{
			Name: "sliding-counter L=100 W=60s: prev=80, cur=30 at 15 s estimates 90 and admits",
			Rule: rule(portero.SlidingCounter, portero.Limit{Count: 100, Window: time.Minute}),
			Steps: []Step{
				{At: 0, Cost: 80, Allowed: true, Remaining: 20, ResetAfter: ms(119250) + 1, CheckReset: true,
					Note: "prev window: 80; the whole limit is back when 80·(1−e/60) < 1 in the next window: e > 59.25 s"},
				{At: sec(70), Cost: 30, Allowed: true, Note: "est 80·(1−10/60) = 66.67, +29 < 100",
					// 80·(5/6)+30 = 96.67 after: room 3.33, so 4 more cost-1 requests.
					Remaining: 4},
				{At: sec(75), Allowed: true, Remaining: 9, Note: "80·0.75 + 30 = 90 < 100",
					// Whole again when 31·(1−e/60) < 1 in [120,180): e > 58.0645… s.
					ResetAfter: 103064516130, CheckReset: true},
				{At: sec(75), Cost: 10, Remaining: 9, RetryAfter: 1, Note: "91 + 9 = 100 is not below 100; below it 1 ns later"},
				{At: sec(75), Cost: 11, Remaining: 9, RetryAfter: 750*time.Millisecond + 1, Note: "needs 80·(1−e/60) < 59: e > 15.75 s"},
				{At: sec(110), Cost: 7, Allowed: true, Remaining: 49, Note: "80·(1−50/60) + 31 = 44.33, +6 < 100; then 51.33: 49 more"},
				{At: sec(30), Cost: 62, Remaining: 0, RetryAfter: ms(89250) + 1, Note: "time went back into [0,60): the start of [60,120) stands, est 118; 80·(1−e/60) + 38 < 39 needs e > 59.25 s after 60 s, 89.25 s after the caller's 30 s"},
				{At: sec(181), Allowed: true, Remaining: 99, Note: "two windows later everything is forgotten"},
			},
		},
		{
			Name:  "sliding-counter L=60 W=60s: an estimate of exactly L refuses",
			Rule:  rule(portero.SlidingCounter, portero.Limit{Count: 60, Window: time.Minute}),
			Steps: slidingTie(),
		},
		{
			Name: "sliding-counter L=1000000 W=1h: an estimate of exactly L refuses where prev·elapsed passes 2^53",
			Rule: rule(portero.SlidingCounter, portero.Limit{Count: 1_000_000, Window: time.Hour}),
			Steps: []Step{
				{At: 0, Cost: 1_000_000, Allowed: true, Remaining: 0, Note: "prev window: 1000000"},
				{At: hour + ms(125100), Cost: 34750, Allowed: true, Remaining: 0, Note: "1000000·(1−125.1/3600) = 965250, + 34749 < 1000000"},
				{At: hour + ms(125100), Remaining: 0, RetryAfter: 1, Note: "965250 + 34750 = 1000000 exactly (999999.9999999999 in float64): refused"},
				{At: hour + ms(125100) + time.Microsecond, Allowed: true, Remaining: 0, Note: "1 µs later the 34751st request of prev has slid out"},
			},
		},
	}
}

// bucketTables are the tables of the token bucket, the leaky meter and
// GCRA.
func bucketTables() []Table {
	// Token bucket, leaky meter and GCRA admit the same requests: burst 2,
	// r = 0.5/s, so one whole token every 2 s.
	bucket := portero.Limit{Count: 1, Window: 2 * time.Second, Burst: 2}
	bucketSteps := []Step{
		{At: 0, Allowed: true, Remaining: 1, ResetAfter: sec(2), CheckReset: true},
		{At: 0, Allowed: true, Remaining: 0, ResetAfter: sec(4), CheckReset: true},
		{At: 0, Remaining: 0, RetryAfter: sec(2), ResetAfter: sec(4), CheckReset: true, Note: "empty"},
		{At: sec(1), Remaining: 0, RetryAfter: sec(1), Note: "half a token"},
		{At: sec(2), Allowed: true, Remaining: 0, ResetAfter: sec(4), CheckReset: true, Note: "a whole token after 2 s"},
		{At: sec(3), Cost: 2, Remaining: 0, RetryAfter: sec(3), Note: "half a token, needs two"},
		{At: sec(10), Cost: 2, Allowed: true, Remaining: 0, ResetAfter: sec(4), CheckReset: true, Note: "full again, no more than the burst"},
		{At: ms(10500), Remaining: 0, RetryAfter: ms(1500)},
	}
	with := func(steps []Step, more ...Step) []Step {
		return append(append([]Step(nil), steps...), more...)
	}
	return []Table{
		{
			Name:  "token-bucket burst 2, r=0.5/s",
			Rule:  rule(portero.TokenBucket, bucket),
			Steps: with(bucketSteps, Step{At: sec(9), Remaining: 0, RetryAfter: sec(3), Note: "time went back 1 s: no refill, and the 2 s wait counts from the caller's 9 s"}),
		},
		{
			Name:  "leaky-meter burst 2, r=0.5/s admits what the token bucket admits",
			Rule:  rule(portero.LeakyMeter, bucket),
			Steps: with(bucketSteps, Step{At: sec(9), Remaining: 0, RetryAfter: sec(3), Note: "time went back 1 s: no drain, and the 2 s wait counts from the caller's 9 s"}),
		},
		{
			Name: "gcra burst 2, r=0.5/s admits what the token bucket admits",
			Rule: rule(portero.GCRA, bucket),
			Steps: with(bucketSteps, Step{At: sec(9), Remaining: 0, RetryAfter: sec(3),
				Note: "time went back 1.5 s: TAT 14 is 5 s ahead, stricter by the step"},
				Step{At: sec(1), Remaining: 0, RetryAfter: sec(11),
					Note: "time went back 9.5 s: the TAT is 13 s ahead, past the 4 s bucket; Remaining stays 0, not negative"}),
		},
	}
}

// queueTables are the leaky queue's tables.
func queueTables() []Table {
	return []Table{
		{
			Name: "leaky-queue of 6 places draining 2/s: 9 arrivals depart at 0.5…3.0 s, 3 dropped",
			Rule: rule(portero.LeakyQueue, portero.Limit{Count: 2, Window: time.Second, Burst: 6}),
			Steps: []Step{
				{At: 0, Allowed: true, Remaining: 5, Delay: ms(500), ResetAfter: ms(500), CheckReset: true},
				{At: 0, Allowed: true, Remaining: 4, Delay: ms(1000)},
				{At: 0, Allowed: true, Remaining: 3, Delay: ms(1500)},
				{At: 0, Allowed: true, Remaining: 2, Delay: ms(2000)},
				{At: 0, Allowed: true, Remaining: 1, Delay: ms(2500)},
				{At: 0, Allowed: true, Remaining: 0, Delay: ms(3000), ResetAfter: ms(3000), CheckReset: true},
				{At: 0, Remaining: 0, RetryAfter: ms(500), Note: "dropped: a place frees when the first departs"},
				{At: 0, Remaining: 0, RetryAfter: ms(500), Note: "dropped"},
				{At: 0, Remaining: 0, RetryAfter: ms(500), Note: "dropped"},
				{At: ms(500), Allowed: true, Remaining: 0, Delay: ms(3000), Note: "the first left at 0.5 s"},
				{At: ms(600), Cost: 2, Remaining: 0, RetryAfter: ms(900), Note: "6 taken until 1.0 s; two places free at 1.5 s"},
				{At: sec(10), Cost: 6, Allowed: true, Remaining: 0, Delay: sec(3)},
				{At: sec(12), Cost: 1, Allowed: true, Remaining: 3, Delay: ms(1500), Note: "departures at 12.5, 13.0, then 13.5"},
				{At: sec(11), Allowed: true, Remaining: 0, Delay: sec(3), Note: "time went back 1 s: the queue looks fuller (5 taken, not 3)"},
				{At: sec(11), Remaining: 0, RetryAfter: ms(500)},
				{At: sec(1), Remaining: 0, RetryAfter: ms(10500), Note: "time went back 10 s: 25 places look taken of 6; Remaining stays 0"},
			},
		},
		{
			Name: "leaky-queue of 6 places draining 2/s, a hit's MaxDelay bounds its wait",
			Rule: rule(portero.LeakyQueue, portero.Limit{Count: 2, Window: time.Second, Burst: 6}),
			Steps: []Step{
				{At: 0, MaxDelay: ms(1200), Allowed: true, Remaining: 5, Delay: ms(500)},
				{At: 0, MaxDelay: ms(1200), Allowed: true, Remaining: 4, Delay: ms(1000)},
				{At: 0, MaxDelay: ms(1200), Remaining: 4, RetryAfter: ms(300), ResetAfter: sec(1), CheckReset: true,
					Note: "it would depart at 1.5 s: refused, nothing taken; at 0.3 s it would depart 1.2 s later"},
				{At: 0, Allowed: true, Remaining: 3, Delay: ms(1500), Note: "no bound: the place is free"},
				{At: ms(400), MaxDelay: ms(1200), Remaining: 3, RetryAfter: ms(400), Note: "it would depart at 2.0 s, 1.6 s away"},
				{At: ms(800), MaxDelay: ms(1200), Allowed: true, Remaining: 3, Delay: ms(1200), Note: "a departure exactly MaxDelay away passes"},
				{At: ms(800), Cost: 4, MaxDelay: sec(10), Remaining: 3, RetryAfter: ms(200), Note: "3 taken of 6: the queue's own wait"},
				{At: ms(800), Cost: 4, MaxDelay: ms(2500), Remaining: 3, RetryAfter: ms(700), Note: "the longer of the two waits: 1.2 + 2.0 − 2.5 s"},
			},
		},
	}
}

// slidingTie is a trace whose sliding-counter estimate (L=60, W=60s) is
// exactly L: 60 requests at 0, 1, …, 59 s, then one each at 60.5, 61.5, …,
// 84.5 s (the estimate before each is 59.5: floor 59, so it passes and
// leaves 0), then at 85 s 60·(1−25/60) + 25 = 60, not below 60: refused.
// The 26th request of the previous window slides out 1 ns later; the whole
// limit is back when 25·(1−e/60) < 1 in the next window, e > 57.6 s.
func slidingTie() []Step {
	var steps []Step
	for i := range 60 {
		steps = append(steps, Step{At: sec(float64(i)), Allowed: true, Remaining: int64(59 - i)})
	}
	for i := range 25 {
		steps = append(steps, Step{At: ms(60500 + 1000*float64(i)), Allowed: true, Remaining: 0})
	}
	return append(steps,
		Step{At: sec(85), Remaining: 0, RetryAfter: 1, ResetAfter: 92600*time.Millisecond + 1, CheckReset: true,
			Note: "60·35/60 + 25 = 60 exactly (59.99999999999999 in float64): refused"},
		Step{At: sec(85) + time.Microsecond, Allowed: true, Remaining: 0, Note: "60·(35 s − 1 µs)/60 + 25 < 60"})
}

func runSteps(t *testing.T, newStore func(t *testing.T) portero.Store) {
	covered := map[portero.Algorithm]bool{}
	for _, tab := range Tables() {
		covered[tab.Rule.Algorithm] = true
		t.Run(tab.Name, func(t *testing.T) {
			s := newStore(t)
			for i, st := range tab.Steps {
				key, cost := cmp.Or(st.Key, "k"), cmp.Or(st.Cost, 1)
				ds, err := s.AllowAll(context.Background(), Base.Add(st.At), []portero.Hit{{Rule: tab.Rule, Key: key, Cost: cost, MaxDelay: st.MaxDelay}})
				if err != nil {
					t.Fatalf("step %d (at %v, %s cost %d): %v", i, st.At, key, cost, err)
				}
				if len(ds) != 1 {
					t.Fatalf("step %d: %d decisions, want 1", i, len(ds))
				}
				got := ds[0]
				want := portero.Decision{Allowed: st.Allowed, Limit: limitOf(tab.Rule), Remaining: st.Remaining,
					RetryAfter: st.RetryAfter, Delay: st.Delay, ResetAfter: got.ResetAfter}
				if st.CheckReset {
					want.ResetAfter = st.ResetAfter
				}
				if tab.Rule.Limit.IsCalendar() {
					want.Quota, want.PeriodLeft = true, st.PeriodLeft
				}
				if got != want {
					t.Errorf("step %d (at %v, %s cost %d; %s):\n got %+v\nwant %+v", i, st.At, key, cost, st.Note, got, want)
				}
			}
		})
	}
	for _, a := range portero.Algorithms {
		if !covered[a] {
			t.Errorf("no step table for %s", a)
		}
	}
}

// RandomRules returns two rules per algorithm with small limits, the
// material of the random traces.
func RandomRules() []portero.Rule {
	var rules []portero.Rule
	for _, a := range portero.Algorithms {
		rules = append(rules,
			portero.Rule{Name: "a", Algorithm: a, Limit: portero.Limit{Count: 5, Window: time.Second}},
			portero.Rule{Name: "b", Algorithm: a, Limit: portero.Limit{Count: 3, Window: 2 * time.Second, Burst: 4}},
		)
	}
	return rules
}

// rulesOf returns RandomRules' rules of algorithm a.
func rulesOf(a portero.Algorithm) []portero.Rule {
	var rules []portero.Rule
	for _, r := range RandomRules() {
		if r.Algorithm == a {
			rules = append(rules, r)
		}
	}
	return rules
}

// Trace is one call of a random trace: the hits of one AllowAll at At after
// Base.
type Trace struct {
	At   time.Duration
	Hits []portero.Hit
}

// RandomTrace returns n seeded random calls over rules: one to three hits
// each, on four keys, with costs from 1 to the rule's largest, at instants
// that never decrease (often equal) unless back is set, in which case about
// one call in twenty steps back by up to a second. The instants are whole
// microseconds.
func RandomTrace(seed uint64, rules []portero.Rule, n int, back bool) []Trace {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	keys := []string{"alice", "bob", "carol", "192.0.2.1"}
	var at time.Duration
	out := make([]Trace, 0, n)
	for range n {
		switch x := r.IntN(10); {
		case x < 3: // same instant
		case x < 9:
			at += time.Duration(r.IntN(400_000)) * time.Microsecond
		default:
			at += time.Duration(r.IntN(3_000_000)) * time.Microsecond
		}
		callAt := at
		if back && r.IntN(20) == 0 {
			callAt -= time.Duration(r.IntN(1_000_000)) * time.Microsecond
		}
		out = append(out, Trace{At: callAt, Hits: randomHits(r, rules, keys)})
	}
	return out
}

// randomHits draws one to three hits over rules and keys, one in four with
// a cost from 1 to the rule's largest, the others of cost 1.
func randomHits(r *rand.Rand, rules []portero.Rule, keys []string) []portero.Hit {
	hits := make([]portero.Hit, 1+r.IntN(3))
	for i := range hits {
		rule := rules[r.IntN(len(rules))]
		cost := int64(1)
		if r.IntN(4) == 0 {
			cost = 1 + r.Int64N(limitOf(rule))
		}
		hits[i] = portero.Hit{Rule: rule, Key: keys[r.IntN(len(keys))], Cost: cost}
	}
	return hits
}

// limitOf is a rule's Decision.Limit, its largest cost: the count of the
// window algorithms, the capacity of the buckets, GCRA and the queue.
func limitOf(rule portero.Rule) int64 {
	switch rule.Algorithm {
	case portero.FixedWindow, portero.FixedWindowAnchored, portero.SlidingLog, portero.SlidingCounter:
		return rule.Limit.Count
	}
	return rule.Limit.Capacity()
}

func runRandom(t *testing.T, newStore func(t *testing.T) portero.Store) {
	for _, a := range portero.Algorithms {
		for _, back := range []bool{false, true} {
			name := string(a)
			if back {
				name += "/time-back"
			}
			t.Run(name, func(t *testing.T) {
				rules := rulesOf(a)
				// Mix in one rule of another algorithm, so that
				// all-or-nothing across algorithms is exercised too.
				other := RandomRules()[(len(rules)*7+len(a))%len(RandomRules())]
				rules = append(rules, other)
				trace := RandomTrace(uint64(len(a))*31+1, rules, 1500, back)
				CompareTrace(t, newStore(t), NewReference(), trace)
				if a == portero.LeakyQueue {
					t.Run("bounded", func(t *testing.T) {
						CompareTrace(t, newStore(t), NewReference(), bounded(trace))
					})
				}
			})
		}
	}
}

// bounded returns a copy of trace in which about half the hits of a
// leaky queue carry a MaxDelay of 0.1 to 3 s (portero.Hit.MaxDelay).
func bounded(trace []Trace) []Trace {
	r := rand.New(rand.NewPCG(11, 13))
	out := make([]Trace, len(trace))
	for i, c := range trace {
		out[i] = Trace{At: c.At, Hits: append([]portero.Hit(nil), c.Hits...)}
		for j := range out[i].Hits {
			if h := &out[i].Hits[j]; h.Rule.Algorithm == portero.LeakyQueue && r.IntN(2) == 0 {
				h.MaxDelay = time.Duration(100+r.IntN(2900)) * time.Millisecond
			}
		}
	}
	return out
}

// CompareTrace replays trace on got and want and fails t at the first call
// whose decisions or errors differ.
func CompareTrace(t *testing.T, got, want portero.Store, trace []Trace) {
	t.Helper()
	ctx := context.Background()
	for i, c := range trace {
		g, gerr := got.AllowAll(ctx, Base.Add(c.At), c.Hits)
		w, werr := want.AllowAll(ctx, Base.Add(c.At), c.Hits)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("call %d at %v %v: error %v, want %v", i, c.At, c.Hits, gerr, werr)
		}
		if len(g) != len(w) {
			t.Fatalf("call %d at %v: %d decisions, want %d", i, c.At, len(g), len(w))
		}
		for j := range g {
			if g[j] != w[j] {
				t.Fatalf("call %d at %v, hit %d of %v:\n got %+v\nwant %+v", i, c.At, j, c.Hits, g[j], w[j])
			}
		}
	}
}

func runAllOrNothing(t *testing.T, newStore func(t *testing.T) portero.Store) {
	for _, a := range portero.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			wide := portero.Rule{Name: "wide", Algorithm: a, Limit: portero.Limit{Count: 10, Window: time.Minute}}
			tight := portero.Rule{Name: "tight", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 1, Window: time.Hour}}
			allOrNothing(t, newStore(t), wide, tight)
		})
	}
}

// allOrNothing checks, on a fresh store, that a call refused by tight (a
// limit of 1 per long span) counts nothing under wide (10 units).
func allOrNothing(t *testing.T, s portero.Store, wide, tight portero.Rule) {
	ctx := context.Background()
	now := Base.Add(time.Second)
	call := func(hits ...portero.Hit) []portero.Decision {
		t.Helper()
		ds, err := s.AllowAll(ctx, now, hits)
		if err != nil {
			t.Fatalf("AllowAll(%v) = %v", hits, err)
		}
		if len(ds) != len(hits) {
			t.Fatalf("AllowAll(%v): %d decisions", hits, len(ds))
		}
		return ds
	}
	ds := call(portero.Hit{Rule: wide, Key: "k", Cost: 2}, portero.Hit{Rule: tight, Key: "k", Cost: 1})
	if !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("first call: %+v, want both allowed", ds)
	}
	// tight is used up: the call is refused, and wide must not count.
	for range 3 {
		ds = call(portero.Hit{Rule: wide, Key: "k", Cost: 3}, portero.Hit{Rule: tight, Key: "k", Cost: 1})
		if ds[1].Allowed {
			t.Fatalf("tight allowed twice: %+v", ds)
		}
		if !ds[0].Allowed {
			t.Fatalf("wide refused alone although it had room: %+v", ds[0])
		}
	}
	// Another key of tight is fresh: the same pair passes, and wide
	// shows that only the first 2 units were ever counted for "k".
	ds = call(portero.Hit{Rule: wide, Key: "k", Cost: 1}, portero.Hit{Rule: tight, Key: "k2", Cost: 1})
	if !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("pair with a fresh tight key: %+v, want both allowed", ds)
	}
	if got, want := ds[0].Remaining, wide.Limit.Capacity()-3; got != want {
		t.Errorf("wide Remaining after 2+1 counted = %d, want %d (a refused call consumed capacity)", got, want)
	}
	// Two hits on the same rule and key add up within one call.
	ds = call(portero.Hit{Rule: wide, Key: "dup", Cost: 4}, portero.Hit{Rule: wide, Key: "dup", Cost: 4})
	if !ds[0].Allowed || !ds[1].Allowed || ds[1].Remaining != ds[0].Remaining-4 {
		t.Errorf("two hits of 4 on one key: %+v, want both allowed, the second with 4 fewer remaining", ds)
	}
	ds = call(portero.Hit{Rule: wide, Key: "dup", Cost: 2}, portero.Hit{Rule: wide, Key: "dup", Cost: 1})
	if !ds[0].Allowed || ds[1].Allowed {
		t.Errorf("2 then 1 more on a key with 2 left: %+v, want allowed then refused", ds)
	}
	ds = call(portero.Hit{Rule: wide, Key: "dup", Cost: 2})
	if !ds[0].Allowed {
		t.Errorf("2 on a key with 2 left after a refused call: %+v, want allowed", ds)
	}
}

func runErrors(t *testing.T, newStore func(t *testing.T) portero.Store) {
	ctx := context.Background()
	now := Base
	for _, a := range portero.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			s := newStore(t)
			good := portero.Rule{Name: "good", Algorithm: a, Limit: portero.Limit{Count: 5, Window: time.Second}}
			cases := []struct {
				name string
				hits []portero.Hit
				want error
			}{
				{"cost 0", []portero.Hit{{Rule: good, Key: "k", Cost: 0}}, portero.ErrInvalidCost},
				{"cost -1", []portero.Hit{{Rule: good, Key: "k", Cost: -1}}, portero.ErrInvalidCost},
				{"cost above the limit", []portero.Hit{{Rule: good, Key: "k", Cost: 6}}, portero.ErrCostExceedsLimit},
				{"huge cost", []portero.Hit{{Rule: good, Key: "k", Cost: 1 << 62}}, portero.ErrCostExceedsLimit},
				{"zero limit", []portero.Hit{{Rule: portero.Rule{Name: "z", Algorithm: a}, Key: "k", Cost: 1}}, portero.ErrInvalidLimit},
				{"negative window", []portero.Hit{{Rule: portero.Rule{Name: "n", Algorithm: a, Limit: portero.Limit{Count: 1, Window: -time.Second}}, Key: "k", Cost: 1}}, portero.ErrInvalidLimit},
				{"unknown algorithm", []portero.Hit{{Rule: portero.Rule{Name: "u", Algorithm: "nope", Limit: good.Limit}, Key: "k", Cost: 1}}, portero.ErrUnknownAlgorithm},
				{"one bad hit among good ones", []portero.Hit{{Rule: good, Key: "k", Cost: 1}, {Rule: good, Key: "k", Cost: 0}}, portero.ErrInvalidCost},
			}
			for _, c := range cases {
				ds, err := s.AllowAll(ctx, now, c.hits)
				if !errors.Is(err, c.want) {
					t.Errorf("%s: AllowAll = %v, %v; want error wrapping %q", c.name, ds, err, c.want)
				}
			}
			// Nothing was counted by the failed calls.
			ds, err := s.AllowAll(ctx, now, []portero.Hit{{Rule: good, Key: "k", Cost: 5}})
			if err != nil || len(ds) != 1 || !ds[0].Allowed {
				t.Errorf("full cost after failed calls = %+v, %v; want allowed (an error consumed capacity)", ds, err)
			}
			ds, err = s.AllowAll(ctx, now, nil)
			if err != nil || len(ds) != 0 {
				t.Errorf("AllowAll(no hits) = %v, %v; want no decisions, no error", ds, err)
			}
			if err := s.Close(ctx); err != nil {
				t.Fatalf("Close = %v", err)
			}
			if _, err := s.AllowAll(ctx, now, []portero.Hit{{Rule: good, Key: "k", Cost: 1}}); !errors.Is(err, portero.ErrClosed) {
				t.Errorf("AllowAll after Close = %v, want ErrClosed", err)
			}
		})
	}
}

// String formats a trace call for failure messages.
func (c Trace) String() string { return fmt.Sprintf("at %v: %v", c.At, c.Hits) }

func runPeek(t *testing.T, newStore func(t *testing.T) portero.Store) {
	ctx := context.Background()
	quota, err := portero.ParseQuota("7/day")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range portero.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			rules := rulesOf(a)
			if a == portero.FixedWindow {
				rules = append(rules, portero.Rule{Name: "quota", Algorithm: a, Limit: quota})
			}
			for _, back := range []bool{false, true} {
				got, want := newStore(t), NewReference()
				for i, c := range RandomTrace(uint64(len(a))*17+3, rules, 400, back) {
					peekThenDecide(t, got, want, i, c)
				}
			}
			got := newStore(t)
			for _, c := range []struct {
				rule portero.Rule
				cost int64
				want error
			}{
				{portero.Rule{Name: "z", Algorithm: a}, 1, portero.ErrInvalidLimit}, // a zero limit
				{rules[0], 0, portero.ErrInvalidCost},
				{rules[0], -1, portero.ErrInvalidCost},
				{rules[0], 1 << 40, portero.ErrCostExceedsLimit}, // above the rule's largest
			} {
				if _, err := got.Peek(ctx, c.rule, "k", Base, c.cost); !errors.Is(err, c.want) {
					t.Errorf("Peek(%s, cost %d) = %v, want %v", c.rule.Name, c.cost, err, c.want)
				}
			}
			if err := got.Close(ctx); err != nil {
				t.Fatalf("Close = %v", err)
			}
			if _, err := got.Peek(ctx, rules[0], "k", Base, 1); !errors.Is(err, portero.ErrClosed) {
				t.Errorf("Peek after Close = %v, want ErrClosed", err)
			}
		})
	}
}

// peekThenDecide peeks at every hit of call c at its own cost, in got and
// in want (which must agree), then decides c in both. For a call of one
// hit the peek must be the decision that follows, field for field, as of
// before it: the same Allowed, RetryAfter, Delay, Quota and PeriodLeft; a
// refusal's Remaining and ResetAfter too, and for an admission the
// Remaining it leaves the peek's less its cost.
func peekThenDecide(t *testing.T, got, want portero.Store, i int, c Trace) {
	t.Helper()
	ctx := context.Background()
	now := Base.Add(c.At)
	var peek portero.Decision
	for _, h := range c.Hits {
		g, gerr := got.Peek(ctx, h.Rule, h.Key, now, h.Cost)
		w, werr := want.Peek(ctx, h.Rule, h.Key, now, h.Cost)
		if gerr != nil || werr != nil || g != w {
			t.Fatalf("call %d at %v: Peek(%s, %q, cost %d) = %+v, %v; want %+v, %v", i, c.At, h.Rule.Name, h.Key, h.Cost, g, gerr, w, werr)
		}
		peek = g
	}
	if len(c.Hits) != 1 {
		CompareTrace(t, got, want, []Trace{c})
		return
	}
	g, gerr := got.AllowAll(ctx, now, c.Hits)
	w, werr := want.AllowAll(ctx, now, c.Hits)
	if gerr != nil || werr != nil || g[0] != w[0] {
		t.Fatalf("call %d at %v %v: %+v, %v; want %+v, %v", i, c.At, c.Hits, g, gerr, w, werr)
	}
	next := peek
	if d := g[0]; d.Allowed {
		next.Remaining, next.ResetAfter = max(peek.Remaining-c.Hits[0].Cost, 0), d.ResetAfter
	}
	if g[0] != next {
		t.Fatalf("call %d at %v %v: Peek %+v, then the call decided %+v", i, c.At, c.Hits, peek, g[0])
	}
}
