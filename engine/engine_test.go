package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/storetest"
)

var t0 = storetest.Base

func mustRule(t testing.TB, name string, alg portero.Algorithm, limit string, shadow bool) *engine.Rule {
	t.Helper()
	r := engine.Rule{Rule: portero.Rule{Name: name, Algorithm: alg}, Shadow: shadow}
	if limit != "" {
		r.Limit = portero.MustParseLimit(limit)
	}
	out, err := engine.NewRule(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// flaky is a store that fails every call while down is set, and counts the
// calls it gets.
type flaky struct {
	portero.Store
	down            atomic.Bool
	allows, peeks   atomic.Int64
	returnShortList bool // AllowAll returns no decisions and no error
}

var errDown = fmt.Errorf("%w: redis: connection refused", portero.ErrStoreUnavailable)

func (f *flaky) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	f.allows.Add(1)
	if f.down.Load() {
		return nil, errDown
	}
	if f.returnShortList {
		return nil, nil
	}
	return f.Store.AllowAll(ctx, now, hits)
}

func (f *flaky) Peek(ctx context.Context, r portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	f.peeks.Add(1)
	if f.down.Load() {
		return portero.Decision{}, errDown
	}
	return f.Store.Peek(ctx, r, key, now, cost)
}

func newEngine(t testing.TB, st portero.Store, o engine.Options) *engine.Engine {
	t.Helper()
	o.Store = st
	e, err := engine.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func decide(t testing.TB, e *engine.Engine, at time.Duration, hits ...engine.Hit) *engine.Verdict {
	t.Helper()
	v := new(engine.Verdict)
	if err := e.Decide(context.Background(), t0.Add(at), hits, v); err != nil {
		t.Fatalf("Decide(%v) = %v", hits, err)
	}
	return v
}

// outcomes formats a verdict as "allowed|refused: outcome,outcome …".
func outcomes(v *engine.Verdict) string {
	var b strings.Builder
	if v.Allowed {
		b.WriteString("allowed:")
	} else {
		b.WriteString("refused:")
	}
	for _, r := range v.Results {
		b.WriteString(" " + r.Outcome.String())
	}
	return b.String()
}

// left returns, for each hit, what is left now (a peek), the state the
// store holds.
func left(t testing.TB, st portero.Store, at time.Duration, hits ...engine.Hit) []int64 {
	t.Helper()
	var out []int64
	for _, h := range hits {
		d, err := st.Peek(context.Background(), h.Rule.Rule, h.Key, t0.Add(at), 1)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.Remaining)
	}
	return out
}

func TestDecide(t *testing.T) {
	ip := mustRule(t, "per-ip", portero.FixedWindow, "3/min", false)
	global := mustRule(t, "global", portero.TokenBucket, "10/s", false)
	shadow := mustRule(t, "dark", portero.FixedWindow, "1/min", true)
	hit := func(r *engine.Rule, cost int64) engine.Hit { return engine.Hit{Rule: r, Key: "k", Cost: cost} }
	check := func(r *engine.Rule) engine.Hit { return engine.Hit{Rule: r, Key: "k", CheckOnly: true} }

	for _, tt := range []struct {
		name    string
		prime   []engine.Hit // decided first, at the same instant
		hits    []engine.Hit
		want    string
		remain  []int64 // Decision.Remaining per result
		left    []int64 // what the store holds afterwards, per hit
		retry   []time.Duration
		never   bool
		decider int
	}{
		{name: "two rules allowed, both counted", hits: []engine.Hit{hit(ip, 1), hit(global, 2)},
			want: "allowed: allowed allowed", remain: []int64{2, 8}, left: []int64{2, 8}, decider: 0},
		{name: "one refuses: the other is not counted and says what is available", prime: []engine.Hit{hit(ip, 3)},
			hits: []engine.Hit{hit(global, 2), hit(ip, 1)},
			want: "refused: not-counted refused", remain: []int64{10, 0}, left: []int64{10, 0},
			retry: []time.Duration{0, 60 * time.Second}, decider: 1},
		{name: "a shadow refusal changes nothing for the enforced rules", prime: []engine.Hit{hit(shadow, 1)},
			hits: []engine.Hit{hit(ip, 1), hit(shadow, 1)},
			want: "allowed: allowed shadow-refused", remain: []int64{2, 0}, left: []int64{2, 0}, decider: 0},
		{name: "a shadow rule is counted when it admits", hits: []engine.Hit{hit(shadow, 1), hit(ip, 1)},
			want: "allowed: near-limit allowed", remain: []int64{0, 2}, left: []int64{0, 2}, decider: 1},
		{name: "check-only: looked at, not counted", hits: []engine.Hit{check(ip), hit(global, 1)},
			want: "allowed: check-only allowed", remain: []int64{3, 9}, left: []int64{3, 9}, decider: 1},
		{name: "check-only refusing: nothing counted", prime: []engine.Hit{hit(ip, 3)}, hits: []engine.Hit{check(ip), hit(global, 1)},
			want: "refused: refused not-counted", remain: []int64{0, 10}, left: []int64{0, 10},
			retry: []time.Duration{60 * time.Second, 0}, decider: 0},
		{name: "a cost above the limit can never pass: no retry, nothing counted", hits: []engine.Hit{hit(global, 1), hit(ip, 4)},
			want: "refused: not-counted can-never-pass", remain: []int64{10, 3}, left: []int64{10, 3}, never: true,
			retry: []time.Duration{0, 0}, decider: 1},
		{name: "can-never-pass wins over a longer wait", prime: []engine.Hit{hit(ip, 3)}, hits: []engine.Hit{hit(ip, 1), hit(global, 11)},
			want: "refused: refused can-never-pass", remain: []int64{0, 10}, left: []int64{0, 10}, never: true,
			retry: []time.Duration{60 * time.Second, 0}, decider: 1},
		{name: "under a shadow rule a cost it can never admit refuses nothing", hits: []engine.Hit{hit(shadow, 2), hit(ip, 1)},
			want: "allowed: can-never-pass allowed", remain: []int64{1, 2}, left: []int64{1, 2}, decider: 1},
		{name: "near limit from 80% used", hits: []engine.Hit{hit(global, 8)},
			want: "allowed: near-limit", remain: []int64{2}, left: []int64{2}, decider: 0},
		{name: "below 80% used is allowed", hits: []engine.Hit{hit(global, 7)},
			want: "allowed: allowed", remain: []int64{3}, left: []int64{3}, decider: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := storetest.NewReference()
			e := newEngine(t, st, engine.Options{})
			if tt.prime != nil {
				decide(t, e, 0, tt.prime...)
			}
			v := decide(t, e, 0, tt.hits...)
			if got := outcomes(v); got != tt.want {
				t.Errorf("Decide = %s, want %s", got, tt.want)
			}
			for i, r := range v.Results {
				if r.Decision.Remaining != tt.remain[i] {
					t.Errorf("result %d (%s): Remaining = %d, want %d", i, r.Rule.Name, r.Decision.Remaining, tt.remain[i])
				}
				if tt.retry != nil && r.Decision.RetryAfter != tt.retry[i] {
					t.Errorf("result %d (%s): RetryAfter = %v, want %v", i, r.Rule.Name, r.Decision.RetryAfter, tt.retry[i])
				}
				if r.Failure != "" {
					t.Errorf("result %d: Failure = %q with a healthy store", i, r.Failure)
				}
			}
			if got := fmt.Sprint(left(t, st, 0, tt.hits...)); got != fmt.Sprint(tt.left) {
				t.Errorf("left in the store = %s, want %v", got, tt.left)
			}
			if v.NeverPasses() != tt.never {
				t.Errorf("NeverPasses = %v, want %v", v.NeverPasses(), tt.never)
			}
			if v.Unavailable() {
				t.Error("Unavailable with a healthy store")
			}
			if got := v.Decider(); got != tt.decider {
				t.Errorf("Decider = %d, want %d", got, tt.decider)
			}
			for _, i := range v.Violated {
				if r := v.Results[i]; r.Rule.Shadow || (r.Outcome != engine.Refused && r.Outcome != engine.CanNeverPass) {
					t.Errorf("Violated holds %d: %+v", i, r)
				}
			}
			if v.Allowed != (len(v.Violated) == 0) {
				t.Errorf("Allowed = %v with Violated %v", v.Allowed, v.Violated)
			}
		})
	}
}

// A rule that admits nothing (requests_per_unit: 0) refuses without asking
// the store, and never says when to come back.
func TestAdmitsNothing(t *testing.T) {
	blocked, err := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "blocked", Algorithm: portero.FixedWindow, Limit: portero.Limit{Window: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	if blocked.MaxCost() != 0 {
		t.Fatalf("MaxCost = %d, want 0", blocked.MaxCost())
	}
	st := &flaky{Store: storetest.NewReference()}
	e := newEngine(t, st, engine.Options{})
	for _, h := range []engine.Hit{{Rule: blocked, Key: "k", Cost: 1}, {Rule: blocked, Key: "k", CheckOnly: true}} {
		v := decide(t, e, 0, h)
		if got := outcomes(v); got != "refused: can-never-pass" || !v.NeverPasses() || v.Results[0].Decision.RetryAfter != 0 {
			t.Errorf("Decide(%+v) = %s %+v, want refused: can-never-pass without retry", h, got, v.Results[0].Decision)
		}
	}
	if n := st.allows.Load() + st.peeks.Load(); n != 0 {
		t.Errorf("%d store calls for a rule that admits nothing, want 0", n)
	}
}

func TestFailurePolicies(t *testing.T) {
	ip := mustRule(t, "per-ip", portero.FixedWindow, "10/min", false)
	dark := mustRule(t, "dark", portero.FixedWindow, "10/min", true)
	hits := []engine.Hit{{Rule: ip, Key: "k", Cost: 1}, {Rule: dark, Key: "k", Cost: 1}}
	for _, tt := range []struct {
		policy      portero.FailurePolicy
		want        string
		unavailable bool
		retry       time.Duration // of the enforced result
	}{
		{portero.FailAllow, "allowed: allowed allowed", false, 0},
		{"", "allowed: allowed allowed", false, 0}, // the default
		{portero.FailDeny, "refused: refused shadow-refused", true, time.Second},
		{portero.FailLocal, "allowed: allowed allowed", false, 0},
	} {
		t.Run(string(tt.policy), func(t *testing.T) {
			st := &flaky{Store: storetest.NewReference()}
			st.down.Store(true)
			e := newEngine(t, st, engine.Options{OnError: tt.policy})
			v := decide(t, e, 0, hits...)
			if got := outcomes(v); got != tt.want {
				t.Errorf("Decide = %s, want %s", got, tt.want)
			}
			if !errors.Is(v.Degraded, errDown) {
				t.Errorf("Degraded = %v, want the store's error", v.Degraded)
			}
			want := tt.policy
			if want == "" {
				want = portero.FailAllow
			}
			for i, r := range v.Results {
				if r.Failure != want {
					t.Errorf("result %d: Failure = %q, want %q", i, r.Failure, want)
				}
				if want != portero.FailLocal && (r.Decision.Remaining != 0 || r.Decision.ResetAfter != 0) {
					t.Errorf("result %d: figures %+v under %s, want none", i, r.Decision, want)
				}
			}
			if want == portero.FailLocal && v.Results[0].Decision.Remaining != 9 {
				t.Errorf("local: Remaining = %d, want 9 (decided in memory)", v.Results[0].Decision.Remaining)
			}
			if v.Unavailable() != tt.unavailable {
				t.Errorf("Unavailable = %v, want %v", v.Unavailable(), tt.unavailable)
			}
			if got := v.Results[0].Decision.RetryAfter; got != tt.retry {
				t.Errorf("RetryAfter = %v, want %v", got, tt.retry)
			}
			// A request that can never pass is refused under every policy,
			// and it is the client's doing (429), not the service's (503).
			v = decide(t, e, 0, engine.Hit{Rule: ip, Key: "k", Cost: 11})
			if v.Allowed || !v.NeverPasses() || v.Unavailable() {
				t.Errorf("cost 11 of 10 under %s = %s, NeverPasses %v, Unavailable %v; want refused, never passes, not unavailable",
					want, outcomes(v), v.NeverPasses(), v.Unavailable())
			}
			// Nothing reached the store while it was down.
			st.down.Store(false)
			if got := fmt.Sprint(left(t, st, 0, hits...)); got != "[10 10]" {
				t.Errorf("left in the store after the outage = %s, want [10 10]", got)
			}
		})
	}
	t.Run("error", func(t *testing.T) {
		st := &flaky{Store: storetest.NewReference()}
		st.down.Store(true)
		e := newEngine(t, st, engine.Options{OnError: portero.FailError})
		v := new(engine.Verdict)
		err := e.Decide(context.Background(), t0, hits, v)
		if !errors.Is(err, portero.ErrStoreUnavailable) || !errors.Is(err, errDown) {
			t.Errorf("Decide = %v, want an error wrapping ErrStoreUnavailable and the store's", err)
		}
		if len(v.Results) != 0 {
			t.Errorf("verdict after an error holds %d results", len(v.Results))
		}
	})
	t.Run("a store error that is not an outage still wraps ErrStoreUnavailable", func(t *testing.T) {
		st := &flaky{Store: storetest.NewReference(), returnShortList: true}
		e := newEngine(t, st, engine.Options{OnError: portero.FailError})
		err := e.Decide(context.Background(), t0, hits, new(engine.Verdict))
		if !errors.Is(err, portero.ErrStoreUnavailable) {
			t.Errorf("Decide with a store that returns no decisions = %v, want ErrStoreUnavailable", err)
		}
	})
	t.Run("check-only peeks fall back too", func(t *testing.T) {
		st := &flaky{Store: storetest.NewReference()}
		st.down.Store(true)
		e := newEngine(t, st, engine.Options{OnError: portero.FailDeny})
		v := decide(t, e, 0, engine.Hit{Rule: ip, Key: "k", CheckOnly: true})
		if got := outcomes(v); got != "refused: refused" || !v.Unavailable() || v.Results[0].Failure != portero.FailDeny {
			t.Errorf("check-only under deny while down = %s %+v", got, v.Results[0])
		}
	})
}

// FailLocal decides in memory with the configured share of each limit, and
// the store takes over again when it answers.
func TestFailLocal(t *testing.T) {
	rule := mustRule(t, "per-ip", portero.FixedWindow, "10/min", false)
	st := &flaky{Store: storetest.NewReference()}
	e := newEngine(t, st, engine.Options{OnError: portero.FailLocal, LocalShare: 0.5})
	st.down.Store(true)
	admitted := 0
	for range 10 {
		v := decide(t, e, 0, engine.Hit{Rule: rule, Key: "k", Cost: 1})
		if v.Allowed {
			admitted++
		}
		if v.Results[0].Failure != portero.FailLocal || v.Unavailable() {
			t.Fatalf("while down: %+v, Unavailable %v", v.Results[0], v.Unavailable())
		}
	}
	if admitted != 5 {
		t.Errorf("admitted %d of 10 while the store was down, want 5 (half of 10/min)", admitted)
	}
	// A cost above this instance's share is refused while the store fails,
	// with the failure's retry time; it is not a request that can never pass.
	v := decide(t, e, 0, engine.Hit{Rule: rule, Key: "other", Cost: 6})
	if v.Allowed || v.NeverPasses() || v.Results[0].Decision.RetryAfter != time.Second {
		t.Errorf("cost 6 above the local share 5 = %s %+v", outcomes(v), v.Results[0].Decision)
	}
	st.down.Store(false)
	v = decide(t, e, 0, engine.Hit{Rule: rule, Key: "k", Cost: 1})
	if !v.Allowed || v.Results[0].Failure != "" || v.Results[0].Decision.Remaining != 9 {
		t.Errorf("after the outage: %s %+v, want the store's own count (9 left)", outcomes(v), v.Results[0])
	}
}

func TestInvalidHits(t *testing.T) {
	e := newEngine(t, storetest.NewReference(), engine.Options{})
	good := mustRule(t, "r", portero.FixedWindow, "1/s", false)
	for _, tt := range []struct {
		name string
		hit  engine.Hit
	}{
		{"no rule", engine.Hit{Key: "k", Cost: 1}},
		{"rule not built with NewRule", engine.Hit{Rule: &engine.Rule{Rule: good.Rule}, Key: "k", Cost: 1}},
		{"cost 0", engine.Hit{Rule: good, Key: "k"}},
		{"negative cost", engine.Hit{Rule: good, Key: "k", Cost: -1}},
	} {
		if err := e.Decide(context.Background(), t0, []engine.Hit{tt.hit}, new(engine.Verdict)); !errors.Is(err, engine.ErrInvalidHit) {
			t.Errorf("%s: Decide = %v, want ErrInvalidHit", tt.name, err)
		}
	}
}

func TestNewValidation(t *testing.T) {
	st := storetest.NewReference()
	for _, o := range []engine.Options{
		{},
		{Store: st, OnError: "open"},
		{Store: st, LocalShare: 1.5},
		{Store: st, LocalShare: -1},
		{Store: st, LocalMaxKeys: -1},
		{Store: st, NearLimit: 2},
		{Store: st, RetryAfterOnFailure: -time.Second},
	} {
		if _, err := engine.New(o); err == nil {
			t.Errorf("New(%+v) = nil error", o)
		}
	}
	for _, r := range []engine.Rule{
		{Rule: portero.Rule{Name: "x", Algorithm: "nope", Limit: portero.PerSecond(1)}},
		{Rule: portero.Rule{Name: "x", Algorithm: portero.GCRA, Limit: portero.Limit{Count: -1, Window: time.Second}}},
		{Rule: portero.Rule{Name: "x", Algorithm: "nope"}},
		{Rule: portero.Rule{Name: "x", Algorithm: portero.FixedWindow, Limit: portero.Limit{Window: -time.Second}}},
	} {
		if _, err := engine.NewRule(r); err == nil {
			t.Errorf("NewRule(%+v) = nil error", r)
		}
	}
}

func TestNearLimitOption(t *testing.T) {
	rule := mustRule(t, "r", portero.FixedWindow, "10/min", false)
	e := newEngine(t, storetest.NewReference(), engine.Options{NearLimit: 0.5})
	var got []engine.Outcome
	for range 6 {
		got = append(got, decide(t, e, 0, engine.Hit{Rule: rule, Key: "k", Cost: 1}).Results[0].Outcome)
	}
	if want := "[allowed allowed allowed allowed near-limit near-limit]"; fmt.Sprint(got) != want {
		t.Errorf("outcomes with NearLimit 0.5 = %v, want %s", got, want)
	}
}

func TestQuota(t *testing.T) {
	for _, tt := range []struct {
		alg   portero.Algorithm
		limit string
		q     int64
		w     time.Duration
	}{
		{portero.FixedWindow, "100/min", 100, time.Minute},
		{portero.SlidingLog, "5/10s", 5, 10 * time.Second},
		{portero.SlidingCounter, "3/h", 3, time.Hour},
		{portero.TokenBucket, "10/s burst 40", 40, 4 * time.Second},
		{portero.GCRA, "2/s", 2, time.Second},
		{portero.LeakyQueue, "1/s burst 5", 5, 5 * time.Second},
		{portero.FixedWindow, "2/day tz Europe/Madrid", 2, 24 * time.Hour}, // a calendar quota: its nominal period
	} {
		r := mustRule(t, "r", tt.alg, tt.limit, false)
		if q, w := r.Quota(); q != tt.q || w != tt.w {
			t.Errorf("Quota(%s %s) = %d, %v; want %d, %v", tt.alg, tt.limit, q, w, tt.q, tt.w)
		}
	}
}

// The engine adds no allocation to the store's: deciding through it costs
// exactly what AllowAll on the same hits costs, all or nothing, and under
// CountEach for a hit decided on its own.
func TestDecideAllocations(t *testing.T) {
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	a := mustRule(t, "a", portero.GCRA, "1000000/s", false)
	b := mustRule(t, "b", portero.FixedWindow, "1000000000/s", false)
	hits := []engine.Hit{{Rule: a, Key: "k", Cost: 1}, {Rule: b, Key: "k", Cost: 1}}
	raw := []portero.Hit{{Rule: a.Rule, Key: "k", Cost: 1}, {Rule: b.Rule, Key: "k", Cost: 1}}
	for _, tt := range []struct {
		counting engine.Counting
		n        int // hits
	}{{engine.AllOrNothing, 2}, {engine.CountEach, 1}} {
		e := newEngine(t, st, engine.Options{Counting: tt.counting})
		ctx, v := context.Background(), new(engine.Verdict)
		now := t0
		store := testing.AllocsPerRun(200, func() { st.AllowAll(ctx, now, raw[:tt.n]) })
		got := testing.AllocsPerRun(200, func() {
			if err := e.Decide(ctx, now, hits[:tt.n], v); err != nil || !v.Allowed {
				t.Fatal(err, v.Allowed)
			}
		})
		if got != store {
			t.Errorf("%s: Decide allocates %v per call, AllowAll alone %v: the engine must add none", tt.counting, got, store)
		}
	}
}
