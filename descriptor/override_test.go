package descriptor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// TestOverridesBounded: 20,000 distinct descriptor values, each with a
// limit override, are keys of one rule, bounded by the store's max_keys;
// distinct override limits in use in a domain are capped
// (Options.MaxOverrides), beyond which a request is refused as invalid
// rather than growing memory; and an override in a domain that is not
// configured is ignored, as envoyproxy/ratelimit ignores it.
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
			Entries: []descriptor.Entry{{Key: "remote_address", Value: value}}, Override: o}}}, t0, p)
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

// twoDomains is a configuration of the domains edge and api, with no
// nodes: overrides need none.
func twoDomains(t *testing.T) *descriptor.Config {
	t.Helper()
	var doms []*descriptor.Domain
	var files []string
	for _, name := range []string{"edge", "api"} {
		d := descriptor.NewDomain(name, name+".yaml")
		doms, files = append(doms, d), append(files, d.Files...)
	}
	cfg, err := descriptor.NewConfig(doms, files)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// overrideAt compiles one descriptor of key k with the override rpu/unit in
// domain at now.
func overrideAt(c *descriptor.Compiler, domain, k string, rpu uint32, unit descriptor.Unit, now time.Time) (*descriptor.Limit, error) {
	var p descriptor.Plan
	err := c.Compile(&descriptor.Request{Domain: domain, Descriptors: []descriptor.Descriptor{{
		Entries: []descriptor.Entry{{Key: k, Value: "v"}}, Override: &descriptor.Override{RequestsPerUnit: rpu, Unit: unit}}}}, now, &p)
	if err != nil {
		return nil, err
	}
	return p.Descriptors[0].Limit, nil
}

// TestOverridesPerDomainAgeOut: the cap on overrides is per domain, so a
// caller filling one domain's leaves the others alone; a full domain
// refuses a new override with an error naming the domain, until one in use
// has gone unused for OverrideIdle and its unit, which then gives its place
// (the one used most recently stays); and an override forgotten and named
// again is the same store rule, so its counters, if any, are found again.
func TestOverridesPerDomainAgeOut(t *testing.T) {
	c := descriptor.NewCompiler(twoDomains(t), descriptor.Options{MaxOverrides: 4, OverrideIdle: time.Minute})
	t0 := storetest.Base
	var first *descriptor.Limit
	for rpu := range uint32(4) {
		l, err := overrideAt(c, "edge", "user", rpu+1, descriptor.Second, t0)
		if err != nil {
			t.Fatalf("override %d of 4 in edge: %v", rpu+1, err)
		}
		if rpu == 0 {
			first = l
		}
	}
	_, err := overrideAt(c, "edge", "user", 99, descriptor.Second, t0)
	var re *descriptor.RequestError
	if !errors.As(err, &re) || re.Kind != descriptor.InvalidArgument ||
		!strings.Contains(re.Msg, `domain "edge" has 4 limit overrides in use`) || !strings.Contains(re.Msg, "replaced in 1m0s") {
		t.Fatalf("fifth override in a full edge: %v; want InvalidArgument naming the domain, its 4 overrides in use and when one may be replaced", err)
	}
	if _, err := overrideAt(c, "api", "user", 99, descriptor.Second, t0); err != nil {
		t.Fatalf("an override in api while edge is full: %v", err)
	}
	// The first override is used again; the other three are not.
	if l, err := overrideAt(c, "edge", "user", 1, descriptor.Second, t0.Add(30*time.Second)); err != nil || l != first {
		t.Fatalf("override in use: %p, %v; want %p", l, err, first)
	}
	if _, err := overrideAt(c, "edge", "user", 99, descriptor.Second, t0.Add(59*time.Second)); err == nil {
		t.Fatal("an override accepted while every one of edge's was used within OverrideIdle")
	}
	for i := range uint32(3) {
		if _, err := overrideAt(c, "edge", "user", 100+i, descriptor.Second, t0.Add(time.Minute)); err != nil {
			t.Fatalf("new override %d once three of edge's are idle: %v", i, err)
		}
	}
	if _, err := overrideAt(c, "edge", "user", 200, descriptor.Second, t0.Add(time.Minute)); err == nil {
		t.Fatal("a fourth new override accepted: it took the place of the one used 30 s ago")
	}
	if l, err := overrideAt(c, "edge", "user", 1, descriptor.Second, t0.Add(time.Minute)); err != nil || l != first {
		t.Fatalf("the override used 30 s ago: %p, %v; want it kept (%p)", l, err, first)
	}
	for i := range uint32(3) {
		if _, err := overrideAt(c, "edge", "user", 100+i, descriptor.Second, t0.Add(90*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	// At t0+2m the first override is the one idle: its place goes to a
	// new one; named again later, it is a new Limit of the same store rule.
	if _, err := overrideAt(c, "edge", "user", 300, descriptor.Second, t0.Add(2*time.Minute+time.Second)); err != nil {
		t.Fatalf("new override once the first is idle: %v", err)
	}
	if _, err := overrideAt(c, "edge", "user", 1, descriptor.Second, t0.Add(2*time.Minute+time.Second)); err == nil {
		t.Fatal("the forgotten first override accepted in a full table of overrides in use")
	}
	again, err := overrideAt(c, "edge", "user", 1, descriptor.Second, t0.Add(4*time.Minute))
	if err != nil || again == first || again.Rule.Rule != first.Rule.Rule {
		t.Fatalf("the first override named again: %v, %v; want a new Limit of rule %+v", again, err, first.Rule.Rule)
	}
}

// TestOverrideIdleIsAtLeastItsUnit: an override per hour is not forgotten
// before an hour unused, whatever OverrideIdle, since its window's counter
// lives that long.
func TestOverrideIdleIsAtLeastItsUnit(t *testing.T) {
	c := descriptor.NewCompiler(twoDomains(t), descriptor.Options{MaxOverrides: 2, OverrideIdle: time.Minute})
	t0 := storetest.Base
	for rpu := range uint32(2) {
		if _, err := overrideAt(c, "api", "user", rpu+1, descriptor.Hour, t0); err != nil {
			t.Fatal(err)
		}
	}
	_, err := overrideAt(c, "api", "user", 3, descriptor.Hour, t0.Add(10*time.Minute))
	if err == nil || !strings.Contains(err.Error(), "replaced in 50m0s") {
		t.Fatalf("a new override 10 minutes after two per hour: %v; want refused, replaceable in 50m0s", err)
	}
	if _, err := overrideAt(c, "api", "user", 3, descriptor.Hour, t0.Add(time.Hour)); err != nil {
		t.Fatalf("a new override an hour after two per hour: %v", err)
	}
}

// TestOverridesFullEnvoyproxy: under Envoyproxy a full domain compiles a new
// override for its request alone, as envoyproxy/ratelimit answers any.
func TestOverridesFullEnvoyproxy(t *testing.T) {
	c := descriptor.NewCompiler(twoDomains(t), descriptor.Options{Envoyproxy: true, MaxOverrides: 1})
	t0 := storetest.Base
	kept, err := overrideAt(c, "edge", "user", 1, descriptor.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	a, errA := overrideAt(c, "edge", "user", 2, descriptor.Second, t0)
	b, errB := overrideAt(c, "edge", "user", 2, descriptor.Second, t0)
	if errA != nil || errB != nil || a == b || a.RequestsPerUnit != 2 {
		t.Fatalf("override past the cap: %v %v, %v %v; want two fresh limits of 2/second", a, errA, b, errB)
	}
	if l, err := overrideAt(c, "edge", "user", 1, descriptor.Second, t0); err != nil || l != kept {
		t.Fatalf("the override kept: %p, %v; want %p", l, err, kept)
	}
}
