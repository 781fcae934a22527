package algorithm_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// keyed runs a Decider or the sliding log over a map of keys, committing
// admitted decisions: the simplest possible store.
type keyed struct {
	dec    algorithm.Decider
	log    *algorithm.SlidingLog
	states map[string]algorithm.State
	logs   map[string]*algorithm.Log
}

func newKeyed(t testing.TB, alg portero.Algorithm, l portero.Limit) *keyed {
	t.Helper()
	k := &keyed{states: map[string]algorithm.State{}, logs: map[string]*algorithm.Log{}}
	var err error
	if alg == portero.SlidingLog {
		k.log, err = algorithm.NewSlidingLog(l)
	} else {
		k.dec, err = algorithm.New(alg, l)
	}
	if err != nil {
		t.Fatalf("New(%s, %v): %v", alg, l, err)
	}
	return k
}

func (k *keyed) maxCost() int64 {
	if k.log != nil {
		return k.log.MaxCost()
	}
	return k.dec.MaxCost()
}

func (k *keyed) decide(key string, now, cost int64) portero.Decision {
	if k.log != nil {
		l := k.logs[key]
		if l == nil {
			l = new(algorithm.Log)
			k.logs[key] = l
		}
		d := k.log.Decide(l, now, cost)
		if d.Allowed {
			k.log.Record(l, now, cost)
		}
		return d
	}
	s, found := k.states[key]
	next, d := k.dec.Decide(s, found, now, cost)
	if d.Allowed {
		k.states[key] = next
	}
	return d
}

// peek decides without committing.
func (k *keyed) peek(key string, now, cost int64) portero.Decision {
	if k.log != nil {
		l := new(algorithm.Log)
		if old := k.logs[key]; old != nil {
			l = old.Clone()
		}
		return k.log.Decide(l, now, cost)
	}
	s, found := k.states[key]
	_, d := k.dec.Decide(s, found, now, cost)
	return d
}

func sec(s float64) int64 { return int64(s * 1e9) }

type step struct {
	at        float64 // seconds
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	delay     time.Duration
}

// times repeats a step n times.
func times(n int, s step) []step {
	out := make([]step, n)
	s.remaining = -1 // not checked
	for i := range out {
		out[i] = s
	}
	return out
}

func cat(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var bucketTable = []step{
	// r = 0.5/s, B = 1: a new key starts full; a whole token after 2 s.
	{at: 0, cost: 1, allowed: true, remaining: 0},
	{at: 1, cost: 1, allowed: false, remaining: 0, retry: time.Second},
	{at: 1.5, cost: 1, allowed: false, remaining: 0, retry: 500 * time.Millisecond},
	{at: 2, cost: 1, allowed: true, remaining: 0},
	{at: 10, cost: 1, allowed: true, remaining: 0}, // idle time does not overfill
	{at: 10, cost: 1, allowed: false, remaining: 0, retry: 2 * time.Second},
}

var weightedTable = []step{
	// r = 10/s, B = 10: no partial payment; cheap calls pass while dear ones wait.
	{at: 0, cost: 7, allowed: true, remaining: 3},
	{at: 0, cost: 5, allowed: false, remaining: 3, retry: 200 * time.Millisecond},
	{at: 0, cost: 1, allowed: true, remaining: 2},
	{at: 0.25, cost: 5, allowed: false, remaining: 4, retry: 50 * time.Millisecond},
	{at: 0.3, cost: 5, allowed: true, remaining: 0},
}

func TestStepTables(t *testing.T) {
	tables := []struct {
		name  string
		alg   portero.Algorithm
		limit portero.Limit
		steps []step
	}{
		{"fixed window boundary at exactly 10 s", portero.FixedWindow, portero.Limit{Count: 3, Window: 10 * time.Second}, []step{
			{at: 8, cost: 1, allowed: true, remaining: 2},
			{at: 9, cost: 1, allowed: true, remaining: 1},
			{at: 9.5, cost: 1, allowed: true, remaining: 0},
			{at: 9.9, cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
			{at: 10, cost: 1, allowed: true, remaining: 2}, // 10 belongs to [10,20)
			{at: 10, cost: 2, allowed: true, remaining: 0},
			{at: 10, cost: 1, allowed: false, remaining: 0, retry: 10 * time.Second},
			{at: 19.999, cost: 3, allowed: false, remaining: 0, retry: time.Millisecond},
			{at: 20, cost: 3, allowed: true, remaining: 0},
		}},
		{"anchored window starts at the first request", portero.FixedWindowAnchored, portero.Limit{Count: 2, Window: 10 * time.Second}, []step{
			{at: 3, cost: 1, allowed: true, remaining: 1},
			{at: 5, cost: 1, allowed: true, remaining: 0},
			{at: 12, cost: 1, allowed: false, remaining: 0, retry: time.Second},
			{at: 13, cost: 1, allowed: true, remaining: 1}, // a new window [13, 23)
			{at: 22.5, cost: 2, allowed: false, remaining: 1, retry: 500 * time.Millisecond},
			{at: 22.5, cost: 1, allowed: true, remaining: 0},
		}},
		{"sliding log window is (t-W, t]", portero.SlidingLog, portero.Limit{Count: 3, Window: 10 * time.Second}, []step{
			{at: 0, cost: 1, allowed: true, remaining: 2},
			{at: 1, cost: 1, allowed: true, remaining: 1},
			{at: 2, cost: 1, allowed: true, remaining: 0},
			{at: 5, cost: 1, allowed: false, remaining: 0, retry: 5 * time.Second},
			{at: 5, cost: 2, allowed: false, remaining: 0, retry: 6 * time.Second},
			{at: 10, cost: 1, allowed: true, remaining: 0}, // the entry at 0 is exactly W old: expired
			{at: 10.5, cost: 1, allowed: false, remaining: 0, retry: 500 * time.Millisecond},
			{at: 12, cost: 2, allowed: true, remaining: 0},
		}},
		{"sliding counter: 80·0.75 + 30 = 90", portero.SlidingCounter, portero.Limit{Count: 100, Window: 60 * time.Second}, cat(
			times(80, step{at: 10, cost: 1, allowed: true}), // prev = 80 in [0, 60)
			times(30, step{at: 74, cost: 1, allowed: true}), // cur = 30 in [60, 120)
			[]step{
				{at: 75, cost: 1, allowed: true, remaining: 9}, // 15 s in: 80·0.75 + 30 = 90 < 100
				{at: 75, cost: 9, allowed: true, remaining: 0}, // 91 + 8 < 100
				{at: 75, cost: 1, allowed: false, remaining: 0, retry: time.Nanosecond},
				{at: 82.5, cost: 10, allowed: true, remaining: 0}, // 80·0.625 + 40 = 90, 90 + 9 < 100
			},
		)},
		{"token bucket r=0.5/s", portero.TokenBucket, portero.Limit{Count: 1, Window: 2 * time.Second}, bucketTable},
		{"leaky meter r=0.5/s", portero.LeakyMeter, portero.Limit{Count: 1, Window: 2 * time.Second}, bucketTable},
		{"gcra r=0.5/s", portero.GCRA, portero.Limit{Count: 1, Window: 2 * time.Second}, bucketTable},
		{"token bucket weighted", portero.TokenBucket, portero.Limit{Count: 10, Window: time.Second}, weightedTable},
		{"leaky meter weighted", portero.LeakyMeter, portero.Limit{Count: 10, Window: time.Second}, weightedTable},
		{"gcra weighted", portero.GCRA, portero.Limit{Count: 10, Window: time.Second}, weightedTable},
		{"token bucket 10/s burst 20", portero.TokenBucket, portero.MustParseLimit("10/s burst 20"), cat(
			times(19, step{at: 0, cost: 1, allowed: true}),
			[]step{
				{at: 0, cost: 1, allowed: true, remaining: 0},
				{at: 0, cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
				{at: 0.05, cost: 1, allowed: false, remaining: 0, retry: 50 * time.Millisecond},
				{at: 0.25, cost: 2, allowed: true, remaining: 0},
			},
		)},
		{"leaky queue: 9 arrivals, 6 places, 2/s", portero.LeakyQueue, portero.Limit{Count: 6, Window: 3 * time.Second}, []step{
			{at: 0, cost: 1, allowed: true, remaining: 5, delay: 500 * time.Millisecond},
			{at: 0, cost: 1, allowed: true, remaining: 4, delay: 1000 * time.Millisecond},
			{at: 0, cost: 1, allowed: true, remaining: 3, delay: 1500 * time.Millisecond},
			{at: 0, cost: 1, allowed: true, remaining: 2, delay: 2000 * time.Millisecond},
			{at: 0, cost: 1, allowed: true, remaining: 1, delay: 2500 * time.Millisecond},
			{at: 0, cost: 1, allowed: true, remaining: 0, delay: 3000 * time.Millisecond},
			{at: 0, cost: 1, allowed: false, remaining: 0, retry: 500 * time.Millisecond},
			{at: 0, cost: 1, allowed: false, remaining: 0, retry: 500 * time.Millisecond},
			{at: 0, cost: 1, allowed: false, remaining: 0, retry: 500 * time.Millisecond},
			{at: 0.5, cost: 1, allowed: true, remaining: 0, delay: 3000 * time.Millisecond}, // the first has left
			{at: 10, cost: 1, allowed: true, remaining: 5, delay: 500 * time.Millisecond},   // empty again
		}},
	}
	for _, tt := range tables {
		t.Run(tt.name, func(t *testing.T) {
			k := newKeyed(t, tt.alg, tt.limit)
			for i, s := range tt.steps {
				d := k.decide("k", sec(s.at), s.cost)
				if s.remaining < 0 {
					s.remaining = d.Remaining
				}
				if d.Allowed != s.allowed || d.Remaining != s.remaining || d.RetryAfter != s.retry || d.Delay != s.delay {
					t.Fatalf("step %d at %vs cost %d = {allowed %v remaining %d retry %v delay %v}, want {%v %d %v %v}",
						i, s.at, s.cost, d.Allowed, d.Remaining, d.RetryAfter, d.Delay, s.allowed, s.remaining, s.retry, s.delay)
				}
			}
		})
	}
}

// randomTrace returns n requests over a few keys at non-decreasing
// microsecond instants, with some requests at the same instant.
func randomTrace(r *rand.Rand, n int, maxCost int64, span time.Duration) (keys []string, at []int64, costs []int64) {
	now := int64(1_700_000_000) * 1e9
	for range n {
		if r.IntN(4) != 0 {
			now += r.Int64N(int64(span)/int64(n)*3/1000+1) * 1000
		}
		keys = append(keys, fmt.Sprintf("k%d", r.IntN(3)))
		at = append(at, now)
		c := int64(1)
		if r.IntN(3) == 0 {
			c = 1 + r.Int64N(maxCost)
		}
		costs = append(costs, c)
	}
	return keys, at, costs
}

var randomLimits = []portero.Limit{
	{Count: 10, Window: time.Second},
	{Count: 3, Window: 10 * time.Second},
	{Count: 7, Window: time.Minute, Burst: 12},
	{Count: 5, Window: time.Second, Rate: 0.5},
	{Count: 100, Window: time.Hour, Burst: 3},
}

// TestBucketsAgree shows that the token bucket, the leaky bucket as a meter
// and GCRA make the same decisions with the same capacity and rate.
func TestBucketsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		l := randomLimits[trial%len(randomLimits)]
		tb := newKeyed(t, portero.TokenBucket, l)
		lm := newKeyed(t, portero.LeakyMeter, l)
		gc := newKeyed(t, portero.GCRA, l)
		keys, at, costs := randomTrace(r, 200, l.Capacity(), 4*l.Window)
		admitted := 0
		for i := range keys {
			a := tb.decide(keys[i], at[i], costs[i])
			b := lm.decide(keys[i], at[i], costs[i])
			c := gc.decide(keys[i], at[i], costs[i])
			if a != b || a != c {
				t.Fatalf("trial %d (%v) request %d: token bucket %+v, leaky meter %+v, gcra %+v", trial, l, i, a, b, c)
			}
			if a.Allowed {
				admitted++
			}
		}
		if admitted == 0 || admitted == len(keys) {
			t.Logf("trial %d admitted %d of %d: a weak trace", trial, admitted, len(keys))
		}
	}
}

// TestRetryAfterIsExact checks the meaning of RetryAfter for every
// algorithm: after a refusal, the same request is still refused one
// nanosecond before now+RetryAfter and admitted at it. It also checks that
// Remaining counts exactly the cost-1 requests that would pass at once.
func TestRetryAfterIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	refusals := 0
	for _, alg := range portero.Algorithms {
		for li, l := range randomLimits {
			for _, jumps := range []bool{false, true} {
				testRetryAfter(t, r, alg, li, l, jumps, &refusals)
			}
		}
	}
	if refusals < 200 {
		t.Fatalf("only %d refusals: the traces do not exercise RetryAfter", refusals)
	}
}

// testRetryAfter runs one random trace; with jumps, one request in eight
// comes from a clock up to two windows behind, and RetryAfter must still be
// exact when measured from that clock.
func testRetryAfter(t *testing.T, r *rand.Rand, alg portero.Algorithm, li int, l portero.Limit, jumps bool, refusals *int) {
	k := newKeyed(t, alg, l)
	keys, at, costs := randomTrace(r, 300, k.maxCost(), 3*l.Window)
	if jumps {
		for i := range at {
			if r.IntN(8) == 0 {
				at[i] -= r.Int64N(2*int64(l.Window)/1000) * 1000
			}
		}
	}
	for i := range keys {
		d := k.decide(keys[i], at[i], costs[i])
		if d.Remaining < 0 {
			t.Fatalf("%s limit %d request %d: Remaining %d < 0", alg, li, i, d.Remaining)
		}
		if d.Allowed {
			if d.RetryAfter != 0 {
				t.Fatalf("%s: allowed with RetryAfter %v", alg, d.RetryAfter)
			}
			continue
		}
		*refusals++
		if d.RetryAfter <= 0 {
			t.Fatalf("%s limit %d request %d: refused with RetryAfter %v", alg, li, i, d.RetryAfter)
		}
		at1 := at[i] + int64(d.RetryAfter)
		if got := k.peek(keys[i], at1, costs[i]); !got.Allowed {
			t.Fatalf("%s limit %v jumps %v request %d cost %d at %d: RetryAfter %v, but refused then: %+v", alg, l, jumps, i, costs[i], at[i], d.RetryAfter, got)
		}
		if got := k.peek(keys[i], at1-1, costs[i]); got.Allowed {
			t.Fatalf("%s limit %v jumps %v request %d: RetryAfter %v, but admitted 1ns earlier", alg, l, jumps, i, d.RetryAfter)
		}
	}
	// Remaining: exactly that many cost-1 requests pass now.
	for _, key := range []string{"k0", "k1", "k2"} {
		now := at[len(at)-1]
		d := k.peek(key, now, 1)
		want := d.Remaining
		if d.Allowed {
			want++
		}
		got := int64(0)
		for k.decide(key, now, 1).Allowed {
			got++
			if got > l.Capacity()+l.Count {
				break
			}
		}
		if got != want {
			t.Fatalf("%s limit %v key %s: peek said %+v, but %d cost-1 requests passed", alg, l, key, d, got)
		}
	}
}

// TestBackwardsTimeCreatesNothing: a trace whose clock jumps back admits no
// more than the same trace with time standing still during the jump, and
// for the buckets and windows (which remember the latest instant) admits
// exactly the same requests.
func TestBackwardsTimeCreatesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, alg := range portero.Algorithms {
		for _, l := range randomLimits {
			jumpy := newKeyed(t, alg, l)
			steady := newKeyed(t, alg, l)
			keys, at, costs := randomTrace(r, 300, 1, 3*l.Window)
			seen := map[string]int64{}
			var nJumpy, nSteady int
			for i := range keys {
				t1 := at[i]
				if r.IntN(10) == 0 {
					t1 -= r.Int64N(int64(2 * l.Window)) // a clock step back
				}
				seen[keys[i]] = max(seen[keys[i]], t1)
				a := jumpy.decide(keys[i], t1, costs[i])
				b := steady.decide(keys[i], seen[keys[i]], costs[i])
				if a.Allowed {
					nJumpy++
				}
				if b.Allowed {
					nSteady++
				}
				exact := alg == portero.TokenBucket || alg == portero.LeakyMeter || alg == portero.FixedWindow || alg == portero.SlidingLog
				if exact && a.Allowed != b.Allowed {
					t.Fatalf("%s %v request %d: with the clock step %v, steady %v", alg, l, i, a.Allowed, b.Allowed)
				}
			}
			if nJumpy > nSteady {
				t.Fatalf("%s %v: a backwards clock admitted %d, a steady one %d", alg, l, nJumpy, nSteady)
			}
		}
	}
}

// TestResetAfterIsExact: ResetAfter is when the whole limit is back — a
// request of the rule's largest cost passes then and not 1 ns before — and
// that is Expiry, from which a store may drop the state (which then decides
// like no state, checked below).
func TestResetAfterIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, alg := range portero.Algorithms {
		if alg == portero.SlidingLog {
			continue
		}
		for _, l := range randomLimits {
			dec, err := algorithm.New(alg, l)
			if err != nil {
				t.Fatal(err)
			}
			var s algorithm.State
			found := false
			keys, at, costs := randomTrace(r, 200, 1, 2*l.Window)
			for i := range keys {
				next, d := dec.Decide(s, found, at[i], costs[i])
				if !d.Allowed {
					continue
				}
				s, found = next, true
				full := at[i] + int64(d.ResetAfter)
				if exp := dec.Expiry(s); full != exp {
					t.Fatalf("%s %v: now+ResetAfter %d, Expiry %d", alg, l, full, exp)
				}
				if _, dd := dec.Decide(s, true, full, dec.MaxCost()); !dd.Allowed {
					t.Fatalf("%s %v: ResetAfter %v, but cost %d refused then: %+v", alg, l, d.ResetAfter, dec.MaxCost(), dd)
				}
				if d.ResetAfter > 0 {
					if _, dd := dec.Decide(s, true, full-1, dec.MaxCost()); dd.Allowed {
						t.Fatalf("%s %v: ResetAfter %v, but cost %d admitted 1 ns before", alg, l, d.ResetAfter, dec.MaxCost())
					}
				}
				// At its expiry the state decides like no state at all.
				exp := dec.Expiry(s)
				_, fresh := dec.Decide(algorithm.State{}, false, exp, 1)
				_, old := dec.Decide(s, true, exp, 1)
				if fresh != old {
					t.Fatalf("%s %v: at Expiry the state decides %+v, no state %+v", alg, l, old, fresh)
				}
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	for _, alg := range portero.Algorithms {
		if _, err := algorithm.New(alg, portero.Limit{Count: 0, Window: time.Second}); !errors.Is(err, portero.ErrInvalidLimit) {
			t.Errorf("New(%s, 0/s) error %v, want ErrInvalidLimit", alg, err)
		}
	}
	if _, err := algorithm.New("nope", portero.PerSecond(1)); !errors.Is(err, portero.ErrUnknownAlgorithm) {
		t.Errorf("New(nope) error %v", err)
	}
	if err := algorithm.CheckCost(0, 10); !errors.Is(err, portero.ErrInvalidCost) {
		t.Errorf("CheckCost(0) = %v", err)
	}
	if err := algorithm.CheckCost(-3, 10); !errors.Is(err, portero.ErrInvalidCost) {
		t.Errorf("CheckCost(-3) = %v", err)
	}
	if err := algorithm.CheckCost(11, 10); !errors.Is(err, portero.ErrCostExceedsLimit) {
		t.Errorf("CheckCost(11, 10) = %v", err)
	}
	if err := algorithm.CheckCost(10, 10); err != nil {
		t.Errorf("CheckCost(10, 10) = %v", err)
	}
	if _, err := algorithm.New(portero.SlidingCounter, portero.Limit{Count: 1 << 33, Window: time.Hour}); !errors.Is(err, portero.ErrInvalidLimit) {
		t.Errorf("sliding counter with 2^33: %v", err)
	}
}

func BenchmarkDecide(b *testing.B) {
	for _, alg := range portero.Algorithms {
		if alg == portero.SlidingLog {
			continue
		}
		dec, _ := algorithm.New(alg, portero.PerSecond(100))
		b.Run(string(alg), func(b *testing.B) {
			b.ReportAllocs()
			var s algorithm.State
			found := false
			now := int64(1_700_000_000) * 1e9
			for b.Loop() {
				now += 1e6
				next, d := dec.Decide(s, found, now, 1)
				if d.Allowed {
					s, found = next, true
				}
			}
		})
	}
}

// The one-word algorithms are WordDeciders, the others are not; DecideWord
// decides as Decide does, and a refusal leaves the word as it was (a store
// that updates the word with a compare-and-swap writes nothing then).
func TestWordDeciders(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, alg := range portero.Algorithms {
		if alg == portero.SlidingLog {
			continue
		}
		l := portero.Limit{Count: 5, Window: time.Second, Burst: 3}
		dec, err := algorithm.New(alg, l)
		if err != nil {
			t.Fatal(err)
		}
		w, ok := dec.(algorithm.WordDecider)
		if want := alg == portero.GCRA || alg == portero.LeakyQueue; ok != want {
			t.Errorf("%s: WordDecider %v, want %v", alg, ok, want)
		}
		if !ok {
			continue
		}
		var a int64
		found := false
		now := int64(1_700_000_000) * 1e9
		refusals := 0
		for i := range 2000 {
			now += int64(r.IntN(600)-150) * 1e6 // sometimes back
			cost := 1 + r.Int64N(l.Capacity())
			s, d := dec.Decide(algorithm.State{A: a}, found, now, cost)
			na, dw := w.DecideWord(a, found, now, cost)
			if dw != d || na != s.A || s.B != 0 {
				t.Fatalf("%s step %d: DecideWord(%d, %v, %d, %d) = %d, %+v; Decide = %+v, %+v", alg, i, a, found, now, cost, na, dw, s, d)
			}
			if !d.Allowed {
				refusals++
				if found && na != a {
					t.Fatalf("%s step %d: a refusal changed the word from %d to %d", alg, i, a, na)
				}
				continue
			}
			a, found = na, true
		}
		if refusals == 0 {
			t.Errorf("%s: no refusal in the trace", alg)
		}
	}
}
