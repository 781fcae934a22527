package sameanswer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/budget"
	"github.com/portero-rl/portero/store/memstore"
)

// leased is basic with every rule served from leased budgets, and a rule
// large enough for batches to grow ("big", 800 per minute).
var leased = scenario{
	rules: leasedPolicy,
	gatewayYAML: `
rules:
  - {name: api, match: {path: /sameanswer.Edge/api}, key: "header:X-Api-Key", algorithm: fixed-window, limit: 5/min, cost: "header:X-Cost", budget: 50ms}
  - {name: dark, match: {path: /sameanswer.Edge/dark}, key: "header:X-Api-Key", algorithm: fixed-window, limit: 1/min, mode: shadow, budget: 50ms}
  - {name: big, match: {path: /sameanswer.Edge/big}, key: "header:X-Api-Key", algorithm: fixed-window, limit: 800/min, cost: "header:X-Cost", budget: 50ms}
`,
	envoyYAML: `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {name: api, unit: minute, requests_per_unit: 5, portero: {budget: 50ms}}
  - key: dark
    shadow_mode: true
    rate_limit: {name: dark, unit: minute, requests_per_unit: 1, portero: {budget: 50ms}}
  - key: big
    rate_limit: {name: big, unit: minute, requests_per_unit: 800, portero: {budget: 50ms}}
`,
	descriptors: map[string][]string{"api": {"api_key"}, "dark": {"dark"}, "big": {"big"}},
	now:         now,
}

func leasedPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	cost, err := policy.ParseCost("header:X-Cost")
	if err != nil {
		t.Fatal(err)
	}
	key := policy.MustParseKey("header:X-Api-Key")
	b := 50 * time.Millisecond
	p, err := policy.New([]policy.Rule{
		{Name: "api", Match: policy.Match{Path: "/sameanswer.Edge/api"}, Key: key, Algorithm: portero.FixedWindow, Limit: portero.PerMinute(5), Cost: cost, Budget: b},
		{Name: "dark", Match: policy.Match{Path: "/sameanswer.Edge/dark"}, Key: key, Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1), Mode: policy.Shadow, Budget: b},
		{Name: "big", Match: policy.Match{Path: "/sameanswer.Edge/big"}, Key: key, Algorithm: portero.FixedWindow, Limit: portero.PerMinute(800), Cost: cost, Budget: b},
	}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSameAnswerLeased: with every rule leased, each door answers as
// without leases — one instance holds the whole fleet's view, so its
// RateLimit is the exact count, never more — and the budget reaches the
// store through each door: it takes batches, fewer calls than hits.
func TestSameAnswerLeased(t *testing.T) {
	var mu sync.Mutex
	var stores []*budget.Store
	open := func() portero.Store {
		m, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		b, err := budget.New(m, budget.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close(context.Background()) })
		mu.Lock()
		stores = append(stores, b)
		mu.Unlock()
		return b
	}
	ds := doorsFor(t, leased, open, "")
	for i, step := range []struct {
		r    request
		want answer
	}{
		{request{"api", 0}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=5;t=0`}},
		{request{"api", 6}, answer{NeverPasses: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=5;t=0`}},
		{request{"api", 1}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=4;t=50`}},
		{request{"api", 3}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=1;t=50`}},
		{request{"api", 1}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`}},
		{request{"api", 1}, answer{Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`, RetryAfter: "50"}},
		{request{"api", 0}, answer{Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`, RetryAfter: "50"}},
		{request{"dark", 1}, answer{Allowed: true}},
		{request{"dark", 1}, answer{Allowed: true}},
		{request{"dark", 5}, answer{Allowed: true}},
	} {
		if got := askAll(t, ds, step.r); got != step.want {
			t.Errorf("step %d %+v: every door says\n  %v\nwant\n  %v", i, step.r, got, step.want)
		}
	}
	for i := 1; i <= 40; i++ {
		want := answer{Allowed: true, Policy: `"big";q=800;w=60`, RateLimit: fmt.Sprintf(`"big";r=%d;t=50`, 800-i)}
		if got := askAll(t, ds, request{"big", 1}); got != want {
			t.Errorf("big, request %d: every door says\n  %v\nwant\n  %v", i, got, want)
		}
	}
	for i, s := range stores {
		st := s.Stats()
		if st.Takes == 0 || st.Calls*2 > st.Hits {
			t.Errorf("door store %d: %+v; want batches taken, at most a call per two hits", i, st)
		}
		t.Logf("door store %d: %d takes of %d units for %d hits, %d calls", i, st.Takes, st.Taken, st.Hits, st.Calls)
	}
}
