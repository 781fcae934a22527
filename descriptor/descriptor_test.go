package descriptor_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/storetest"
)

func entries(kv ...string) []descriptor.Entry {
	var es []descriptor.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, descriptor.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func limit(t testing.TB, s descriptor.LimitSpec) *descriptor.Limit {
	t.Helper()
	l, err := descriptor.NewLimit(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// edge builds, by hand, the shape of examples/envoy/config's edge domain.
func edge(t testing.TB) *descriptor.Config {
	t.Helper()
	d := descriptor.NewDomain("edge", "edge.yaml")
	add := func(parent *descriptor.Node, n *descriptor.Node) *descriptor.Node {
		t.Helper()
		var dup *descriptor.Node
		if parent == nil {
			dup = d.Add(n)
		} else {
			dup = parent.Add(n)
		}
		if dup != nil {
			t.Fatalf("duplicate %s", n.Composite())
		}
		return n
	}
	add(nil, &descriptor.Node{Key: "remote_address", Limit: limit(t, descriptor.LimitSpec{FullKey: "edge.remote_address", Unit: descriptor.Second, RequestsPerUnit: 10})})
	add(nil, &descriptor.Node{Key: "remote_address", Value: "50.0.0.5", Limit: limit(t, descriptor.LimitSpec{FullKey: "edge.remote_address_50.0.0.5", Unit: descriptor.Second})})
	key := add(nil, &descriptor.Node{Key: "api_key"})
	add(key, &descriptor.Node{Key: "plan", Value: "gold", Limit: limit(t, descriptor.LimitSpec{Name: "gold", Unit: descriptor.Minute, RequestsPerUnit: 600})})
	add(key, &descriptor.Node{Key: "plan", Value: "free", Limit: limit(t, descriptor.LimitSpec{Name: "free", Unit: descriptor.Minute, RequestsPerUnit: 60, Replaces: []string{"gold"}})})
	add(nil, &descriptor.Node{Key: "path", Value: "/api/*/export", ShadowMode: true,
		Limit: limit(t, descriptor.LimitSpec{FullKey: "edge.path_/api/*/export", Unit: descriptor.Hour, RequestsPerUnit: 100, Shadow: true})})
	add(nil, &descriptor.Node{Key: "internal", Limit: limit(t, descriptor.LimitSpec{FullKey: "edge.internal", Unlimited: true})})
	add(nil, &descriptor.Node{Key: "sender", Value: "bulk-*", ShareThreshold: true,
		Limit: limit(t, descriptor.LimitSpec{Name: "bulk", Unit: descriptor.Second, RequestsPerUnit: 50, Algorithm: portero.TokenBucket, Burst: 100})})
	if dup := d.Add(&descriptor.Node{Key: "remote_address"}); dup == nil {
		t.Fatal("Add of a second key-only remote_address returned no duplicate")
	}
	c, err := descriptor.NewConfig([]*descriptor.Domain{d}, d.Files)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMatch(t *testing.T) {
	d := edge(t).Domain("edge")
	for _, tt := range []struct {
		entries []descriptor.Entry
		want    string
	}{
		{entries("remote_address", "10.0.0.1"), "edge.remote_address"},
		{entries("remote_address", "50.0.0.5"), "edge.remote_address_50.0.0.5"},
		{entries("api_key", "k", "plan", "gold"), "gold"},
		{entries("api_key", "k"), ""},
		{entries("remote_address", "1", "plan", "gold"), ""},
		{entries("path", "/api/v2/export"), "edge.path_/api/*/export"},
		{entries("path", "/api/export"), ""},
		{entries("unknown", "x"), ""},
		{nil, ""},
	} {
		m := d.Match(tt.entries)
		got := ""
		if m.Limit != nil {
			got = m.Limit.PolicyName()
		}
		if got != tt.want {
			t.Errorf("Match(%v) = %q, want %q", tt.entries, got, tt.want)
		}
	}
	a, b := entries("sender", "bulk-a"), entries("sender", "bulk-b")
	if ka, kb := descriptor.StoreKey("edge", a, d.Match(a)), descriptor.StoreKey("edge", b, d.Match(b)); ka != kb {
		t.Errorf("share_threshold: keys %q and %q differ", ka, kb)
	}
}

func TestNewLimit(t *testing.T) {
	gold := limit(t, descriptor.LimitSpec{Name: "gold", Unit: descriptor.Minute, RequestsPerUnit: 600})
	if r := gold.Rule; r.Algorithm != portero.FixedWindow || r.Limit != portero.PerMinute(600) || r.MaxCost() != 600 || r.Announce.Policy != `"gold";q=600;w=60` {
		t.Errorf("gold: %+v %q", r.Rule, r.Announce.Policy)
	}
	tb := limit(t, descriptor.LimitSpec{Name: "tb", Unit: descriptor.Second, RequestsPerUnit: 10, Algorithm: portero.TokenBucket, Burst: 40})
	if tb.Rule.Announce.Policy != `"tb";q=40;w=4` {
		t.Errorf("a token bucket announces q=B, w=B/r: %q", tb.Rule.Announce.Policy)
	}
	blocked := limit(t, descriptor.LimitSpec{FullKey: "edge.x", Unit: descriptor.Second})
	if !blocked.Blocked() || blocked.Rule.MaxCost() != 0 || blocked.Rule.Announce.Policy != `"edge.x";q=0;w=1` {
		t.Errorf("requests_per_unit 0: Blocked %v MaxCost %d %q", blocked.Blocked(), blocked.Rule.MaxCost(), blocked.Rule.Announce.Policy)
	}
	if u := limit(t, descriptor.LimitSpec{FullKey: "edge.i", Unlimited: true}); u.Rule != nil {
		t.Error("an unlimited limit has a rule")
	}
	// A derived name that cannot be an sf-string is an error that says
	// how to fix it; a given one is simply an error.
	if _, err := descriptor.NewLimit(descriptor.LimitSpec{FullKey: "edge.path_café", Unit: descriptor.Second, RequestsPerUnit: 1}); err == nil || !strings.Contains(err.Error(), "give the rate_limit a name") {
		t.Errorf("NewLimit(café) = %v, want an error asking for a name", err)
	}
	if _, err := descriptor.NewLimit(descriptor.LimitSpec{Name: "tab\t", Unit: descriptor.Second, RequestsPerUnit: 1}); err == nil {
		t.Error("NewLimit with a name holding a tab = nil error")
	}
}

func TestOverrideLimit(t *testing.T) {
	o, err := descriptor.OverrideLimit("edge", entries("remote_address", "10.0.0.1"), descriptor.Override{RequestsPerUnit: 42, Unit: descriptor.Day})
	if err != nil {
		t.Fatal(err)
	}
	if o.PolicyName() != "edge.remote_address" || o.Rule.Limit != (portero.Limit{Count: 42, Window: 24 * time.Hour}) || o.Rule.Announce.Policy != `"edge.remote_address";q=42;w=86400` {
		t.Errorf("override: %s %+v %q", o.PolicyName(), o.Rule.Limit, o.Rule.Announce.Policy)
	}
	// Keys from the request that an sf-string cannot carry are
	// percent-encoded in the header text only.
	u, err := descriptor.OverrideLimit("edge", entries("café%", "v"), descriptor.Override{RequestsPerUnit: 1, Unit: descriptor.Second})
	if err != nil {
		t.Fatal(err)
	}
	if u.PolicyName() != "edge.café%" || u.Rule.Announce.Name != `"edge.caf%C3%A9%25"` {
		t.Errorf("override with UTF-8: %q announced %s", u.PolicyName(), u.Rule.Announce.Name)
	}
	if r, err := descriptor.OverrideLimit("edge", entries("a", "1", "b", ""), descriptor.Override{RequestsPerUnit: 7, Unit: descriptor.Hour}); err != nil || r.PolicyName() != "edge.a.b" {
		t.Errorf("override of two entries: %v, %v; want edge.a.b", r, err)
	}
	if r, err := descriptor.OverrideLimit("edge", entries("a", "1"), descriptor.Override{Unit: descriptor.Second}); err != nil || !r.Blocked() || r.Rule.MaxCost() != 0 {
		t.Errorf("override of 0 per second: %+v, %v; want blocked", r, err)
	}
	if _, err := descriptor.OverrideLimit("edge", entries("k", "v"), descriptor.Override{RequestsPerUnit: 1, Unit: 99}); err == nil {
		t.Error("unit 99: nil error")
	}
}

func TestCompile(t *testing.T) {
	c := descriptor.NewCompiler(edge(t), descriptor.Options{})
	zero, five := uint64(0), uint64(5)
	for _, tt := range []struct {
		name string
		req  descriptor.Request
		want string // per hit: rule key cost [check]; then per descriptor its hit
	}{
		{"one descriptor", descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{{Entries: entries("remote_address", "10.0.0.1")}}},
			"edge.remote_address edge|remote_address=10.0.0.1 1 | 0"},
		{"request hits apply", descriptor.Request{Domain: "edge", Hits: 3, Descriptors: []descriptor.Descriptor{{Entries: entries("remote_address", "1")}}},
			"edge.remote_address edge|remote_address=1 3 | 0"},
		{"descriptor hits win; 0 is check-only", descriptor.Request{Domain: "edge", Hits: 3, Descriptors: []descriptor.Descriptor{
			{Entries: entries("remote_address", "1"), Hits: &five}, {Entries: entries("api_key", "k", "plan", "gold"), Hits: &zero}}},
			"edge.remote_address edge|remote_address=1 5; gold edge|api_key=k|plan=gold 0 check | 0 1"},
		{"no match, unlimited: no hit", descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{
			{Entries: entries("nope", "x")}, {Entries: entries("internal", "true")}, {Entries: entries("remote_address", "1")}}},
			"edge.remote_address edge|remote_address=1 1 | -1 -1 0"},
		{"replaces drops the replaced limit", descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{
			{Entries: entries("api_key", "k", "plan", "gold")}, {Entries: entries("api_key", "k", "plan", "free")}}},
			"free edge|api_key=k|plan=free 1 | -1 0"},
		{"an override replaces the configuration", descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{
			{Entries: entries("remote_address", "1"), Override: &descriptor.Override{RequestsPerUnit: 7, Unit: descriptor.Hour}}}},
			"edge.remote_address edge|remote_address=1 1 | 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var p descriptor.Plan
			if err := c.Compile(&tt.req, storetest.Base, &p); err != nil {
				t.Fatal(err)
			}
			var hs []string
			for _, h := range p.Hits {
				s := fmt.Sprintf("%s %s %d", h.Rule.Name, h.Key, h.Cost)
				if h.CheckOnly {
					s += " check"
				}
				hs = append(hs, s)
			}
			var ds []string
			for i, d := range p.Descriptors {
				ds = append(ds, fmt.Sprint(d.Hit))
				if d.Hit >= 0 && p.Of[d.Hit] != i {
					t.Errorf("Of[%d] = %d, want %d", d.Hit, p.Of[d.Hit], i)
				}
			}
			if got := strings.Join(hs, "; ") + " | " + strings.Join(ds, " "); got != tt.want {
				t.Errorf("Compile = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	c := descriptor.NewCompiler(edge(t), descriptor.Options{MaxDescriptors: 2, MaxEntries: 2, MaxValueLen: 8})
	big := uint64(math.MaxUint32) + 1
	d := func(kv ...string) descriptor.Descriptor { return descriptor.Descriptor{Entries: entries(kv...)} }
	for _, tt := range []struct {
		name string
		req  *descriptor.Request
		kind descriptor.ErrorKind
	}{
		{"nil", nil, descriptor.InvalidArgument},
		{"no domain", &descriptor.Request{Descriptors: []descriptor.Descriptor{d("a", "b")}}, descriptor.InvalidArgument},
		{"no descriptors", &descriptor.Request{Domain: "edge"}, descriptor.InvalidArgument},
		{"too many descriptors", &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{d("a", "b"), d("a", "b"), d("a", "b")}}, descriptor.InvalidArgument},
		{"too many entries", &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{d("a", "b", "c", "d", "e", "f")}}, descriptor.InvalidArgument},
		{"no entries", &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{{}}}, descriptor.InvalidArgument},
		{"empty key", &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{d("", "b")}}, descriptor.InvalidArgument},
		{"long value", &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{d("a", "123456789")}}, descriptor.InvalidArgument},
		{"huge hits", &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{{Entries: entries("a", "b"), Hits: &big}}}, descriptor.InvalidArgument},
		{"bad override unit", &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{{Entries: entries("a", "b"), Override: &descriptor.Override{RequestsPerUnit: 1}}}}, descriptor.InvalidArgument},
		{"unknown domain", &descriptor.Request{Domain: "nope", Descriptors: []descriptor.Descriptor{d("a", "b")}}, descriptor.NotFound},
	} {
		var re *descriptor.RequestError
		if err := c.Compile(tt.req, storetest.Base, new(descriptor.Plan)); !errors.As(err, &re) || re.Kind != tt.kind {
			t.Errorf("%s: Compile = %v, want a RequestError of kind %d", tt.name, err, tt.kind)
		}
	}
	allow := descriptor.NewCompiler(edge(t), descriptor.Options{AllowUnknownDomains: true})
	var p descriptor.Plan
	if err := allow.Compile(&descriptor.Request{Domain: "nope", Descriptors: []descriptor.Descriptor{d("a", "b")}}, storetest.Base, &p); err != nil || len(p.Hits) != 0 {
		t.Errorf("unknown domain allowed: %v, %d hits", err, len(p.Hits))
	}
}

// Status reports each descriptor as the Envoy door answers it.
func TestStatus(t *testing.T) {
	c := descriptor.NewCompiler(edge(t), descriptor.Options{})
	e, err := engine.New(engine.Options{Store: storetest.NewReference()})
	if err != nil {
		t.Fatal(err)
	}
	now := storetest.Base.Add(250 * time.Millisecond)
	decide := func(req *descriptor.Request) (*descriptor.Plan, *engine.Verdict) {
		t.Helper()
		p, v := new(descriptor.Plan), new(engine.Verdict)
		if err := c.Compile(req, now, p); err != nil {
			t.Fatal(err)
		}
		if err := e.Decide(context.Background(), now, p.Hits, v); err != nil {
			t.Fatal(err)
		}
		return p, v
	}
	p, v := decide(&descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{
		{Entries: entries("remote_address", "1")}, {Entries: entries("internal", "x")}, {Entries: entries("nope", "x")}}})
	st := p.Status(0, v, now)
	if st.Code != descriptor.OK || !st.Counted || st.Remaining != 9 || st.ResetAfter != 750*time.Millisecond || st.Limit.PolicyName() != "edge.remote_address" {
		t.Errorf("allowed: %+v", st)
	}
	if st := p.Status(1, v, now); !st.Unlimited || st.Remaining != math.MaxUint32 || st.Code != descriptor.OK {
		t.Errorf("unlimited: %+v", st)
	}
	if st := p.Status(2, v, now); st.Limit != nil || st.Code != descriptor.OK || st.Outcome != 0 {
		t.Errorf("no match: %+v", st)
	}
	// A blocked address can never pass: OVER_LIMIT without a retry time,
	// and the other descriptor is not counted.
	p, v = decide(&descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{
		{Entries: entries("remote_address", "2")}, {Entries: entries("remote_address", "50.0.0.5")}}})
	if descriptor.CodeOf(v) != descriptor.OverLimit {
		t.Errorf("blocked address: code %v", descriptor.CodeOf(v))
	}
	if st := p.Status(1, v, now); st.Code != descriptor.OverLimit || st.Outcome != engine.CanNeverPass || st.RetryAfter != 0 || st.ResetAfter != 750*time.Millisecond {
		t.Errorf("blocked: %+v", st)
	}
	if st := p.Status(0, v, now); st.Code != descriptor.OK || st.Counted || st.Remaining != 10 {
		t.Errorf("beside a blocked one: %+v", st)
	}
}

// Envoy's descriptors become hits, the engine decides them, and the
// statuses say where each descriptor stands.
func ExampleCompiler_Compile() {
	lim, _ := descriptor.NewLimit(descriptor.LimitSpec{FullKey: "edge.remote_address", Unit: descriptor.Second, RequestsPerUnit: 2})
	dom := descriptor.NewDomain("edge", "edge.yaml")
	dom.Add(&descriptor.Node{Key: "remote_address", Limit: lim})
	cfg, _ := descriptor.NewConfig([]*descriptor.Domain{dom}, dom.Files)
	c := descriptor.NewCompiler(cfg, descriptor.Options{})
	e, _ := engine.New(engine.Options{Store: storetest.NewReference()})

	req := &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{
		{Entries: []descriptor.Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
	}}
	now := time.Unix(1_700_000_000, 0)
	var p descriptor.Plan
	var v engine.Verdict
	for range 3 {
		if err := c.Compile(req, now, &p); err != nil {
			panic(err)
		}
		if err := e.Decide(context.Background(), now, p.Hits, &v); err != nil {
			panic(err)
		}
		st := p.Status(0, &v, now)
		fmt.Println(descriptor.CodeOf(&v), st.Limit.PolicyName(), st.Remaining)
	}
	// Output:
	// OK edge.remote_address 1
	// OK edge.remote_address 0
	// OVER_LIMIT edge.remote_address 0
}
