package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/storetest"
)

func concRule(t testing.TB, name string, max int64, service, shadow bool) *engine.Rule {
	t.Helper()
	r, err := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: name}, Concurrency: portero.ConcurrencyRule{Max: max}, Service: service, Shadow: shadow})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// flakyLeases is a lease store that fails every acquisition while down.
type flakyLeases struct {
	portero.LeaseStore
	down     atomic.Bool
	acquires atomic.Int64
}

func (f *flakyLeases) Acquire(ctx context.Context, now time.Time, r portero.ConcurrencyRule, key string) (portero.Lease, portero.Decision, error) {
	f.acquires.Add(1)
	if f.down.Load() {
		return nil, portero.Decision{}, errDown
	}
	return f.LeaseStore.Acquire(ctx, now, r, key)
}

// held counts the unexpired leases under (rule, key) at now, by trying to
// take Max more and giving them back.
func held(t *testing.T, ls portero.LeaseStore, r *engine.Rule, key string, now time.Time) int64 {
	t.Helper()
	var got []portero.Lease
	for range r.Concurrency.Max {
		l, d, err := ls.Acquire(context.Background(), now, r.Concurrency, key)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
		got = append(got, l)
	}
	for _, l := range got {
		l.Release(context.Background())
	}
	return r.Concurrency.Max - int64(len(got))
}

func admit(t *testing.T, e *engine.Engine, at time.Duration, hits ...engine.Hit) *engine.Verdict {
	t.Helper()
	v := new(engine.Verdict)
	if err := e.Admit(context.Background(), t0.Add(at), hits, v); err != nil {
		t.Fatalf("Admit = %v", err)
	}
	return v
}

// Admit is all or nothing across rate and concurrency hits: a rate refusal
// gives the leases back at once, and a concurrency refusal counts no rate
// hit and takes no later lease.
func TestAdmitAllOrNothing(t *testing.T) {
	st := storetest.NewReference()
	ls := storetest.NewLeaseReference()
	e := newEngine(t, st, engine.Options{Leases: ls})
	rate := mustRule(t, "rate", portero.FixedWindow, "2/min", false)
	one := concRule(t, "one", 1, false, false)
	svc := concRule(t, "svc", 5, true, false)
	hits := []engine.Hit{{Rule: one, Key: "a", Cost: 1}, {Rule: rate, Key: "a", Cost: 1}, {Rule: svc, Key: "*", Cost: 1}}

	v := admit(t, e, 0, hits...)
	if !v.Allowed || len(v.Held()) != 2 {
		t.Fatalf("first: allowed %v, %d held; want admitted holding 2", v.Allowed, len(v.Held()))
	}
	if h := v.Held(); h[0].Rule != one || h[0].Key != "a" || h[1].Rule != svc {
		t.Errorf("Held = %+v, want one/a then svc/*", h)
	}
	if d := v.Results[0].Decision; d.Limit != 1 || d.Remaining != 0 || v.Results[0].Outcome != engine.NearLimit {
		t.Errorf("one: %+v %v, want limit 1 remaining 0 near-limit", d, v.Results[0].Outcome)
	}

	// The slot of "one" is held: the second request is refused by it; the
	// rate counter does not move and svc is not asked.
	v2 := admit(t, e, time.Second, hits...)
	if v2.Allowed || len(v2.Held()) != 0 || len(v2.Violated) != 1 || v2.Violated[0] != 0 {
		t.Fatalf("second: allowed %v, held %d, violated %v; want refused by one alone, nothing held", v2.Allowed, len(v2.Held()), v2.Violated)
	}
	if o := v2.Results[1].Outcome; o != engine.NotCounted {
		t.Errorf("rate under a concurrency refusal: %v, want not-counted", o)
	}
	if o := v2.Results[2].Outcome; o != engine.NotCounted {
		t.Errorf("svc after the refusal: %v, want not-counted", o)
	}
	if d := v2.Results[0].Decision; d.RetryAfter != engine.DefaultLeaseRetryAfter {
		t.Errorf("refusal's RetryAfter = %v, want at most %v", d.RetryAfter, engine.DefaultLeaseRetryAfter)
	}
	if n := held(t, ls, svc, "*", t0.Add(time.Second)); n != 1 {
		t.Errorf("svc holds %d leases after the refusal, want 1 (the first request's)", n)
	}
	// One of the 2 is still free: the rate counted the first request only.
	if d, _ := st.Peek(context.Background(), rate.Rule, "a", t0.Add(time.Second), 1); !d.Allowed || d.Remaining != 1 {
		t.Errorf("rate Peek after the concurrency refusal = %+v, want allowed with 1 left (counted once)", d)
	}
	if v2.Unavailable() {
		t.Error("a client's concurrency refusal is Unavailable (503); want 429")
	}

	for _, h := range v.Held() {
		h.Lease.Release(context.Background())
	}
	if v := admit(t, e, 2*time.Second, hits...); !v.Allowed {
		t.Error("after the release, a request is refused; want admitted")
	}
}

// A rate refusal gives back the leases the request took.
func TestAdmitRateRefusalReleases(t *testing.T) {
	st := storetest.NewReference()
	ls := storetest.NewLeaseReference()
	e := newEngine(t, st, engine.Options{Leases: ls})
	rate := mustRule(t, "rate", portero.FixedWindow, "1/min", false)
	conc := concRule(t, "conc", 3, false, false)
	hits := []engine.Hit{{Rule: conc, Key: "k", Cost: 1}, {Rule: rate, Key: "k", Cost: 1}}
	if v := admit(t, e, 0, hits...); !v.Allowed || len(v.Held()) != 1 {
		t.Fatalf("first: allowed %v held %d", v.Allowed, len(v.Held()))
	}
	v := admit(t, e, time.Second, hits...)
	if v.Allowed || len(v.Held()) != 0 {
		t.Fatalf("second: allowed %v held %d; want refused by the rate, nothing held", v.Allowed, len(v.Held()))
	}
	if res := v.Results[0]; res.Outcome != engine.NotCounted || res.Decision.Remaining != 2 {
		t.Errorf("conc under a rate refusal = %v remaining %d, want not-counted with 2 free", res.Outcome, res.Decision.Remaining)
	}
	if n := held(t, ls, conc, "k", t0.Add(time.Second)); n != 1 {
		t.Errorf("%d leases held after the rate refusal, want 1 (the first request's)", n)
	}
}

// Decide refuses concurrency hits (only Admit hands back leases), a
// concurrency hit must cost 1 and not be check-only, and an engine whose
// store keeps no leases cannot admit them.
func TestAdmitInvalid(t *testing.T) {
	conc := concRule(t, "conc", 1, false, false)
	e := newEngine(t, storetest.NewReference(), engine.Options{Leases: storetest.NewLeaseReference()})
	v := new(engine.Verdict)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"Decide", func() error {
			return e.Decide(context.Background(), t0, []engine.Hit{{Rule: conc, Key: "k", Cost: 1}}, v)
		}, "decide it with Admit"},
		{"cost 2", func() error {
			return e.Admit(context.Background(), t0, []engine.Hit{{Rule: conc, Key: "k", Cost: 2}}, v)
		}, "one request in flight"},
		{"check-only", func() error {
			return e.Admit(context.Background(), t0, []engine.Hit{{Rule: conc, Key: "k", Cost: 1, CheckOnly: true}}, v)
		}, "only looked at"},
		{"no lease store", func() error {
			noLeases := newEngine(t, struct{ portero.Store }{storetest.NewReference()}, engine.Options{})
			return noLeases.Admit(context.Background(), t0, []engine.Hit{{Rule: conc, Key: "k", Cost: 1}}, v)
		}, "keeps no leases"},
	} {
		if err := tc.call(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		r    engine.Rule
		want string
	}{
		{engine.Rule{Rule: portero.Rule{Name: "x", Algorithm: portero.FixedWindow}, Concurrency: portero.ConcurrencyRule{Max: 1}}, "no algorithm"},
		{engine.Rule{Rule: portero.Rule{Name: "x"}, Concurrency: portero.ConcurrencyRule{Max: -1}}, "must be positive"},
		{engine.Rule{Rule: portero.Rule{Name: "x"}, Concurrency: portero.ConcurrencyRule{Max: 1, TTL: time.Microsecond}}, "ttl"},
		{engine.Rule{Rule: portero.Rule{Name: "x"}, Concurrency: portero.ConcurrencyRule{Name: "y", Max: 1}}, "named"},
		{engine.Rule{Rule: portero.Rule{Name: "x"}, Unit: "content-bytes", Concurrency: portero.ConcurrencyRule{Max: 1}}, "counts concurrent-requests"},
	} {
		if _, err := engine.NewRule(tc.r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewRule(%+v) = %v, want an error containing %q", tc.r, err, tc.want)
		}
	}
}

// A service-wide concurrency refusal is the service's (Unavailable); a
// shadow one never refuses.
func TestAdmitServiceAndShadow(t *testing.T) {
	ls := storetest.NewLeaseReference()
	e := newEngine(t, storetest.NewReference(), engine.Options{Leases: ls})
	svc := concRule(t, "svc", 1, true, false)
	shadow := concRule(t, "shadow", 1, false, true)
	hits := []engine.Hit{{Rule: shadow, Key: "k", Cost: 1}, {Rule: svc, Key: "*", Cost: 1}}
	admit(t, e, 0, hits...)
	v := admit(t, e, 0, hits...)
	if v.Allowed || !v.Unavailable() || v.StoreFailed() {
		t.Errorf("svc full: allowed %v, Unavailable %v, StoreFailed %v; want refused for the service's sake, not a store failure", v.Allowed, v.Unavailable(), v.StoreFailed())
	}
	if o := v.Results[0].Outcome; o != engine.ShadowRefused {
		t.Errorf("shadow full: %v, want shadow-refused", o)
	}
	v = admit(t, e, 0, hits[0])
	if !v.Allowed || v.Results[0].Outcome != engine.ShadowRefused || len(v.Held()) != 0 {
		t.Errorf("shadow alone, full: allowed %v %v held %d; want admitted, shadow-refused, nothing held", v.Allowed, v.Results[0].Outcome, len(v.Held()))
	}
}

// The lease failure policy is the engine's one failure policy: with the
// lease store down, allow admits without a lease, deny refuses for the
// service's sake, local takes leases in the engine's memory with
// LocalShare of Max, error returns the error; the store's rate hits
// follow the same policy in the same verdict.
func TestAdmitFailurePolicies(t *testing.T) {
	rate := mustRule(t, "rate", portero.FixedWindow, "10/min", false)
	conc := concRule(t, "conc", 4, false, false)
	hits := []engine.Hit{{Rule: conc, Key: "k", Cost: 1}, {Rule: rate, Key: "k", Cost: 1}}
	for _, pol := range portero.FailurePolicies {
		t.Run(string(pol), func(t *testing.T) {
			mem, err := memstore.New(memstore.Config{SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close(context.Background())
			st := &flaky{Store: mem}
			ls := &flakyLeases{LeaseStore: mem}
			st.down.Store(true)
			ls.down.Store(true)
			e := newEngine(t, st, engine.Options{Leases: ls, OnError: pol, LocalShare: 0.5})
			v := new(engine.Verdict)
			err = e.Admit(context.Background(), t0, hits, v)
			if pol == portero.FailError {
				if !errors.Is(err, portero.ErrStoreUnavailable) || len(v.Held()) != 0 {
					t.Fatalf("Admit = %v, %d held; want ErrStoreUnavailable and nothing held", err, len(v.Held()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			res := v.Results[0]
			if res.Failure != pol || v.Degraded == nil || v.Results[1].Failure != pol {
				t.Errorf("Failure = %q/%q, Degraded %v; want %q for both hits", res.Failure, v.Results[1].Failure, v.Degraded, pol)
			}
			switch pol {
			case portero.FailAllow:
				if !v.Allowed || len(v.Held()) != 0 {
					t.Errorf("allow: allowed %v, held %d; want admitted without a lease", v.Allowed, len(v.Held()))
				}
			case portero.FailDeny:
				if v.Allowed || !v.Unavailable() || !v.StoreFailed() || res.Decision.RetryAfter != engine.DefaultRetryAfterOnFailure {
					t.Errorf("deny: allowed %v, Unavailable %v, StoreFailed %v, retry %v; want a 503 refusal", v.Allowed, v.Unavailable(), v.StoreFailed(), res.Decision.RetryAfter)
				}
			case portero.FailLocal:
				// Max 4 at a share of 0.5: two leases in local memory.
				if !v.Allowed || len(v.Held()) != 1 || res.Decision.Limit != 2 {
					t.Fatalf("local: allowed %v held %d limit %d; want admitted with a local lease of 2", v.Allowed, len(v.Held()), res.Decision.Limit)
				}
				admit(t, e, 0, hits...)
				v3 := admit(t, e, 0, hits...)
				if v3.Allowed || v3.Results[0].Outcome != engine.Refused || v3.Unavailable() {
					t.Errorf("local, third: allowed %v %v; want refused by the local share (429)", v3.Allowed, v3.Results[0].Outcome)
				}
				v.Held()[0].Lease.Release(context.Background())
				if v4 := admit(t, e, 0, hits...); !v4.Allowed {
					t.Error("local: a released local lease did not free its slot")
				}
			}
			if n := ls.acquires.Load(); n == 0 {
				t.Error("the lease store was never asked")
			}
		})
	}
}
