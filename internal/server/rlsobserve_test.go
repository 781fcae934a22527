package server

import (
	"context"
	"fmt"
	"github.com/portero-rl/portero/internal/admin"
	"testing"
	"time"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/store/budget"
	"github.com/portero-rl/portero/store/memstore"
)

// observed compiles and decides one request of two descriptors against a
// memory store, as the RLS does, for the observer's benchmarks, and
// returns the metrics that observe it, set up for its configuration.
func observed(tb testing.TB) (*descriptor.Request, *descriptor.Plan, *engine.Verdict, *rlsMetrics) {
	tb.Helper()
	cfg, err := envoyconf.Parse([]envoyconf.Source{{Name: "b.yaml", Data: []byte(`domain: b
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
`)}}, envoyconf.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Store: st})
	if err != nil {
		tb.Fatal(err)
	}
	req := &descriptor.Request{Domain: "b", Descriptors: []descriptor.Descriptor{
		{Entries: []descriptor.Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
		{Entries: []descriptor.Entry{{Key: "user", Value: "alice"}}},
	}}
	p, v := new(descriptor.Plan), new(engine.Verdict)
	if err := descriptor.NewCompiler(cfg, descriptor.Options{}).Compile(req, time.Now(), p); err != nil {
		tb.Fatal(err)
	}
	if err := eng.Decide(context.Background(), time.Now(), p.Hits, v); err != nil || len(v.Results) != 2 {
		tb.Fatalf("Decide: %v, %d results", err, len(v.Results))
	}
	m := newRLSMetrics(0, func() float64 { return 1 }, func() (budget.Stats, bool) { return budget.Stats{}, false })
	m.setLimits(cfg)
	return req, p, v, m
}

// TestRLSObserverAllocatesNothing: counting a call's metrics (and the
// dashboard's keys closest to their limits) allocates nothing once its
// keys have been seen (the RLS answers a call in a few
// microseconds and one allocation).
func TestRLSObserverAllocatesNothing(t *testing.T) {
	req, p, v, m := observed(t)
	o := m.observer("grpc")
	o.Observe(req, p, v, time.Microsecond, nil)
	if n := testing.AllocsPerRun(100, func() { o.Observe(req, p, v, time.Microsecond, nil) }); n != 0 {
		t.Errorf("Observe allocates %v times per call, want 0", n)
	}
}

// BenchmarkRLSObserve is the metrics' cost per RLS call of two
// descriptors.
func BenchmarkRLSObserve(b *testing.B) {
	req, p, v, m := observed(b)
	o := m.observer("grpc")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.Observe(req, p, v, time.Microsecond, nil)
		}
	})
}

// TestRLSMetricsOverridesBounded: limit overrides name their series after
// the request's keys, and past a domain's cap (under compatibility) each
// request brings a fresh Limit: neither grows the metrics past
// maxOverrideSeries keys, the rest counted under "(override)".
func TestRLSMetricsOverridesBounded(t *testing.T) {
	cfg, err := envoyconf.Parse([]envoyconf.Source{{Name: "b.yaml", Data: []byte("domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5}\n")}},
		envoyconf.Options{Envoyproxy: true})
	if err != nil {
		t.Fatal(err)
	}
	c := descriptor.NewCompiler(cfg, descriptor.Options{Envoyproxy: true, MaxOverrides: 2})
	st, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	eng, err := engine.New(engine.Options{Store: st, Counting: engine.CountEach})
	if err != nil {
		t.Fatal(err)
	}
	m := newRLSMetrics(0, func() float64 { return 1 }, func() (budget.Stats, bool) { return budget.Stats{}, false })
	o := m.observer("grpc")
	now := time.Unix(1_700_000_000, 0)
	observe := func(key string, rpu uint32) {
		t.Helper()
		req := &descriptor.Request{Domain: "b", Descriptors: []descriptor.Descriptor{{Entries: []descriptor.Entry{{Key: key, Value: "v"}},
			Override: &descriptor.Override{RequestsPerUnit: rpu, Unit: descriptor.Second}}}}
		p := new(descriptor.Plan)
		if err := c.Compile(req, now, p); err != nil {
			t.Fatal(err)
		}
		v := new(engine.Verdict)
		if err := eng.Decide(context.Background(), now, p.Hits, v); err != nil || !v.Allowed {
			t.Fatalf("Decide: %v, allowed %v", err, v.Allowed)
		}
		o.Observe(req, p, v, time.Microsecond, nil)
	}
	for i := range 3000 {
		observe("user", uint32(i)+1) // one key, a fresh Limit past the second
	}
	for i := range 2000 {
		observe(fmt.Sprint("k", i), 1) // a new key each time
	}
	cached := 0
	m.byLimit.Range(func(_, _ any) bool { cached++; return true })
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "portero_rls_decisions_total" {
			for _, x := range mf.GetMetric() {
				keys[admin.Label(x, "key")] += x.GetCounter().GetValue()
			}
		}
	}
	if cached != 0 || len(keys) != maxOverrideSeries+1 {
		t.Errorf("after 5000 overrides: %d Limits cached, %d keys in the metrics; want 0 and %d", cached, len(keys), maxOverrideSeries+1)
	}
	if keys["user"] != 3000 || keys[overflowKey] != 2000-(maxOverrideSeries-1) {
		t.Errorf("user counted %v, %s %v; want 3000 and %d", keys["user"], overflowKey, keys[overflowKey], 2000-(maxOverrideSeries-1))
	}
}
