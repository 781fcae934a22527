package server

import (
	"context"
	"testing"
	"time"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/store/memstore"
)

// observed compiles and decides one request of two descriptors against a
// memory store, as the RLS does, for the observer's benchmarks.
func observed(tb testing.TB) (*descriptor.Request, *descriptor.Plan, *engine.Verdict) {
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
	return req, p, v
}

// TestRLSObserverAllocatesNothing: counting a call's metrics allocates
// nothing once its keys have been seen (the RLS answers a call in a few
// microseconds and one allocation).
func TestRLSObserverAllocatesNothing(t *testing.T) {
	req, p, v := observed(t)
	o := newRLSMetrics(0, func() float64 { return 1 }).observer("grpc")
	o.Observe(req, p, v, time.Microsecond, nil)
	if n := testing.AllocsPerRun(100, func() { o.Observe(req, p, v, time.Microsecond, nil) }); n != 0 {
		t.Errorf("Observe allocates %v times per call, want 0", n)
	}
}

// BenchmarkRLSObserve is the metrics' cost per RLS call of two
// descriptors.
func BenchmarkRLSObserve(b *testing.B) {
	req, p, v := observed(b)
	o := newRLSMetrics(0, func() float64 { return 1 }).observer("grpc")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.Observe(req, p, v, time.Microsecond, nil)
		}
	})
}
