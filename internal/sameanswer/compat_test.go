package sameanswer_test

import (
	"log/slog"
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/rls"
)

// compatDoors are the RLS in the compatibility mode on both transports,
// each over a store of its own, under failure policy pol: envoyproxy/ratelimit's reading of the
// files, its keys, its counting (engine.CountEach), and Portero's
// RateLimit fields (rls.HeadersIETF) so that its answers can be compared
// field for field.
func compatDoors(t *testing.T, sc scenario, open func() portero.Store, pol portero.FailurePolicy) []door {
	t.Helper()
	lim, err := envoyconf.Parse([]envoyconf.Source{{Name: "edge.yaml", Data: []byte(sc.envoyYAML)}}, envoyconf.Options{Envoyproxy: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []door
	for _, tr := range []rls.Transport{rls.TransportGRPC, rls.TransportLean} {
		e, err := engine.New(engine.Options{Store: open(), Counting: engine.CountEach, OnError: cmpOr(pol, portero.FailError)})
		if err != nil {
			t.Fatal(err)
		}
		// Redis keeps envoyproxy/ratelimit's counters under its own keys,
		// without the store's prefix: CACHE_KEY_PREFIX keeps the doors apart.
		prefix := string(pol) + "_" + string(tr) + "_"
		svc := rls.NewService(descriptor.NewCompiler(lim, descriptor.Options{Envoyproxy: true, KeyPrefix: prefix}), e,
			rls.ServiceOptions{Now: sc.now, Logger: slog.New(slog.DiscardHandler), Compat: &rls.Compat{Headers: rls.HeadersIETF}})
		out = append(out, envoy{c: serveRLS(t, svc, tr), transport: tr, descs: sc.descriptors, compat: true})
	}
	return out
}

// TestSameAnswerCompat: the compatibility mode answers a fixed window as
// every other door does while the requests can pass: the limit spent, the
// refusal (envoyproxy/ratelimit counts it, and the window stays refused
// as it does at the other doors), a check-only look once spent, a shadow
// rule that never refuses. A cost above the limit is where it differs by
// design (it counts the cost, docs/envoy.md), and so are a look before
// anything is counted (its reset is the window's end, Portero's 0).
func TestSameAnswerCompat(t *testing.T) {
	open := memStores(t)
	ds := append(doors(t, open, ""), compatDoors(t, basic, open, "")...)
	for i, step := range []struct {
		r    request
		want answer
	}{
		{request{"api", 1}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=4;t=50`}},
		{request{"api", 3}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=1;t=50`}},
		{request{"api", 1}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`}},
		{request{"api", 1}, answer{Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`, RetryAfter: "50"}},
		{request{"api", 1}, answer{Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`, RetryAfter: "50"}},
		{request{"api", 0}, answer{Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`, RetryAfter: "50"}}, // check-only, spent
		{request{"dark", 1}, answer{Allowed: true}},
		{request{"dark", 1}, answer{Allowed: true}}, // over its limit, still allowed
	} {
		if got := askAll(t, ds, step.r); got != step.want {
			t.Errorf("step %d %+v: every door says\n  %v\nwant\n  %v", i, step.r, got, step.want)
		}
	}
}
