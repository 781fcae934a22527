package descriptor_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/storetest"
)

// ruleCounter is a store that records the distinct rules it was asked
// about: every distinct rule is a table a store keeps for good.
type ruleCounter struct {
	portero.Store
	rules map[portero.Rule]bool
}

func (s *ruleCounter) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	for _, h := range hits {
		s.rules[h.Rule] = true
	}
	return s.Store.AllowAll(ctx, now, hits)
}

// TestOverridesBounded (issue 10.12): 20,000 distinct descriptor values,
// each with a limit override, are keys of one rule, bounded by the store's
// max_keys; distinct override limits are capped (Options.MaxOverrides),
// beyond which a request is refused as invalid rather than growing memory;
// and an override in a domain that is not configured is ignored, as
// envoyproxy/ratelimit ignores it.
func TestOverridesBounded(t *testing.T) {
	ms, err := memstore.New(memstore.Config{SweepInterval: -1, MaxKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close(context.Background())
	st := &ruleCounter{Store: ms, rules: map[portero.Rule]bool{}}
	e, err := engine.New(engine.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	c := descriptor.NewCompiler(edge(t), descriptor.Options{MaxOverrides: 8})
	t0 := storetest.Base
	ov := &descriptor.Override{RequestsPerUnit: 2, Unit: descriptor.Minute}
	ask := func(c *descriptor.Compiler, domain, value string, o *descriptor.Override) (*descriptor.Plan, *engine.Verdict, error) {
		p, v := new(descriptor.Plan), new(engine.Verdict)
		err := c.Compile(&descriptor.Request{Domain: domain, Descriptors: []descriptor.Descriptor{{
			Entries: []descriptor.Entry{{Key: "remote_address", Value: value}}, Override: o}}}, p)
		if err != nil {
			return p, v, err
		}
		return p, v, e.Decide(context.Background(), t0, p.Hits, v)
	}
	const n = 20_000
	for i := range n {
		p, v, err := ask(c, "edge", fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), ov)
		if err != nil || !v.Allowed || p.Descriptors[0].Limit.RequestsPerUnit != 2 {
			t.Fatalf("override %d: %+v, %v", i, p, err)
		}
	}
	if len(st.rules) != 1 {
		t.Errorf("%d distinct values made %d store rules, want 1", n, len(st.rules))
	}
	if got := ms.Len(); got > 1000 {
		t.Errorf("memstore holds %d keys, want at most max_keys 1000", got)
	}
	for range 2 {
		ask(c, "edge", "192.0.2.1", ov)
	}
	if _, v, _ := ask(c, "edge", "192.0.2.1", ov); v.Allowed {
		t.Error("third request under a 2/min override allowed")
	}
	for rpu := range uint32(20) {
		_, _, err := ask(c, "edge", "192.0.2.3", &descriptor.Override{RequestsPerUnit: 100 + rpu, Unit: descriptor.Hour})
		var re *descriptor.RequestError
		if rpu < 7 && err != nil {
			t.Fatalf("override limit %d of 8: %v", rpu+2, err)
		}
		if rpu >= 7 && (!errors.As(err, &re) || re.Kind != descriptor.InvalidArgument) {
			t.Fatalf("override limit %d of 8: err %v, want InvalidArgument", rpu+2, err)
		}
	}
	if len(st.rules) > 8 {
		t.Errorf("%d store rules after 21 distinct override limits, want at most 8", len(st.rules))
	}
	before := len(st.rules)
	var re *descriptor.RequestError
	if _, _, err := ask(c, "elsewhere", "v", ov); !errors.As(err, &re) || re.Kind != descriptor.NotFound {
		t.Errorf("override in an unknown domain: %v, want NotFound", err)
	}
	open := descriptor.NewCompiler(edge(t), descriptor.Options{AllowUnknownDomains: true})
	for i := range 100 {
		p, v, err := ask(open, fmt.Sprint("d", i), "v", ov)
		if err != nil || !v.Allowed || p.Descriptors[0].Limit != nil {
			t.Fatalf("override in an unknown domain with AllowUnknownDomains: %+v, %v; want allowed without a limit", p, err)
		}
	}
	if len(st.rules) != before {
		t.Errorf("overrides in unknown domains made %d store rules", len(st.rules)-before)
	}
}
