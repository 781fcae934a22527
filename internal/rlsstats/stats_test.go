package rlsstats

import (
	"context"
	"testing"
	"time"

	gostats "github.com/lyft/gostats"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/store/memstore"
)

// TestObserveAllocatesNothing: counting a call of a configured key takes
// atomic adds and no allocation (the RLS answers in microseconds), under
// envoyproxy/ratelimit's counting.
func TestObserveAllocatesNothing(t *testing.T) {
	cfg, err := envoyconf.Parse([]envoyconf.Source{{Name: "b.yaml", Data: []byte("domain: b\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n")}},
		envoyconf.Options{Envoyproxy: true})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := memstore.New(memstore.Config{})
	eng, err := engine.New(engine.Options{Store: st, Counting: engine.CountEach})
	if err != nil {
		t.Fatal(err)
	}
	comp := descriptor.NewCompiler(cfg, descriptor.Options{Envoyproxy: true})
	s, err := New(Options{sink: gostats.NewNullSink(), Limits: comp.Limits, CountEach: true})
	if err != nil {
		t.Fatal(err)
	}
	req := &descriptor.Request{Domain: "b", Descriptors: []descriptor.Descriptor{{Entries: []descriptor.Entry{{Key: "ip", Value: "1"}}}}}
	var p descriptor.Plan
	var v engine.Verdict
	if err := comp.Compile(req, time.Now(), &p); err != nil {
		t.Fatal(err)
	}
	if err := eng.Decide(context.Background(), time.Now(), p.Hits, &v); err != nil {
		t.Fatal(err)
	}
	o := s.Observer(true)
	o.Observe(req, &p, &v, time.Millisecond, nil)
	if n := testing.AllocsPerRun(100, func() { o.Observe(req, &p, &v, time.Millisecond, nil) }); n != 0 {
		t.Errorf("Observe allocates %v times per call, want 0", n)
	}
	if got := s.store.NewCounter("ratelimit.service.rate_limit.b.ip.total_hits").Value(); got != 102 {
		t.Errorf("total_hits = %d, want 102", got)
	}
}
