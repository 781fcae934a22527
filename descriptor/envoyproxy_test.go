package descriptor_test

import (
	"math"
	"testing"
	"time"

	"github.com/portero-rl/portero/descriptor"
)

// envoyDomain builds a domain with AddEnvoyproxy, as the loader does under
// envoyconf.Options.Envoyproxy.
func envoyDomain(t *testing.T, nodes ...*descriptor.Node) *descriptor.Domain {
	t.Helper()
	d := descriptor.NewDomain("domain", "d.yaml")
	for _, n := range nodes {
		if dup := d.AddEnvoyproxy(n); dup != nil {
			t.Fatalf("duplicate %s", n.Composite())
		}
	}
	return d
}

func lim(t *testing.T, name string, rpu uint32) *descriptor.Limit {
	return limit(t, descriptor.LimitSpec{Name: name, FullKey: "domain." + name, Unit: descriptor.Minute, RequestsPerUnit: rpu, Envoyproxy: true})
}

// TestMatchEnvoyproxy: envoyproxy/ratelimit's matching on composite
// key_value strings (its config_impl.go GetLimit), beside Portero's Match
// where the two differ.
func TestMatchEnvoyproxy(t *testing.T) {
	nested := &descriptor.Node{Key: "nestedWild", Value: "val1"}
	nested.AddEnvoyproxy(&descriptor.Node{Key: "wild", Value: "goo*", Limit: lim(t, "nested", 20)})
	d := envoyDomain(t,
		&descriptor.Node{Key: "wild", Value: "foo*", Limit: lim(t, "wild", 20)},
		&descriptor.Node{Key: "noWild", Value: "foo", Limit: lim(t, "noWild", 20)},
		&descriptor.Node{Key: "midWild", Value: "bar*b", Limit: lim(t, "midWild", 20)},
		&descriptor.Node{Key: "multiWild", Value: "foo*bar*baz", Limit: lim(t, "multiWild", 10)},
		nested,
		&descriptor.Node{Key: "x", Value: "y_z", Limit: lim(t, "xyz", 1)},
		&descriptor.Node{Key: "a", Value: "b", Limit: lim(t, "ab", 2)},
		&descriptor.Node{Key: "any", Value: "*", Limit: lim(t, "any", 2)},
		&descriptor.Node{Key: "files", Value: "files/*", ShareThreshold: true, Limit: lim(t, "files", 10)},
	)
	cases := []struct {
		entries        []descriptor.Entry
		envoy, portero string // the limit's name, or ""
		key            string // EnvoyproxyKey with prefix "prefix:"
	}{
		{entries("wild", "foo1"), "wild", "wild", "prefix:domain_wild_foo1_"},
		{entries("wild", "foo"), "wild", "wild", "prefix:domain_wild_foo_"},
		{entries("wild", "bar"), "", "", ""},
		{entries("noWild", "foo"), "noWild", "noWild", "prefix:domain_noWild_foo_"},
		{entries("noWild", "foo1"), "", "", ""},
		{entries("midWild", "bar123b"), "midWild", "midWild", "prefix:domain_midWild_bar123b_"},
		{entries("midWild", "barbx"), "", "", ""},
		{entries("multiWild", "foo_bar_baz"), "multiWild", "multiWild", "prefix:domain_multiWild_foo_bar_baz_"},
		{entries("multiWild", "foobaz"), "", "", ""},
		{entries("nestedWild", "val1", "wild", "goo2"), "nested", "nested", "prefix:domain_nestedWild_val1_wild_goo2_"},
		{entries("nestedWild", "val1", "wild", "foo2"), "", "", ""},
		{entries("nestedWild", "val1"), "", "", ""}, // a prefix of a deeper rule
		{entries("any", ""), "any", "any", "prefix:domain_any__"},
		// Composite strings: (x_y, z) is (x, y_z), (wild_foo, x) is (wild, foo_x),
		// and (a_b, c) falls back to the node whose composite is "a_b".
		{entries("x_y", "z"), "xyz", "", "prefix:domain_x_y_z_"},
		{entries("wild_foo", "x"), "wild", "", "prefix:domain_wild_foo_x_"},
		{entries("a_b", "c"), "ab", "", "prefix:domain_a_b_c_"},
		// share_threshold: the pattern, not the value, in the key.
		{entries("files", "files/a.pdf"), "files", "files", "prefix:domain_files_files/*_"},
		{entries("files", "files/b.csv"), "files", "files", "prefix:domain_files_files/*_"},
	}
	name := func(m descriptor.Match) string {
		if m.Limit == nil {
			return ""
		}
		return m.Limit.Name
	}
	for _, c := range cases {
		m := d.MatchEnvoyproxy(c.entries)
		if got := name(m); got != c.envoy {
			t.Errorf("MatchEnvoyproxy(%v) = %q, want %q", c.entries, got, c.envoy)
		}
		if got := name(d.Match(c.entries)); got != c.portero {
			t.Errorf("Match(%v) = %q, want %q", c.entries, got, c.portero)
		}
		if m.Limit != nil {
			if got := descriptor.EnvoyproxyKey("prefix:", "domain", c.entries, m); got != c.key {
				t.Errorf("EnvoyproxyKey(%v) = %q, want %q", c.entries, got, c.key)
			}
		}
	}
}

// TestEnvoyproxyKey: envoyproxy/ratelimit's cache keys, without the window
// (test/limiter TestGenerateCacheKeys, ...Prefix, ...WithShareThreshold:
// "domain_key_value_1234" is this key and the window's start).
func TestEnvoyproxyKey(t *testing.T) {
	parent := &descriptor.Node{Key: "parent", Value: "value1"}
	parent.AddEnvoyproxy(&descriptor.Node{Key: "files", Value: "nested/*", ShareThreshold: true, Limit: lim(t, "nested", 1)})
	top := &descriptor.Node{Key: "files", Value: "top/*", ShareThreshold: true}
	top.AddEnvoyproxy(&descriptor.Node{Key: "files", Value: "nested/*", ShareThreshold: true, Limit: lim(t, "both", 1)})
	d := envoyDomain(t, &descriptor.Node{Key: "key", Limit: lim(t, "k", 1)}, parent, top)
	for _, c := range []struct {
		prefix  string
		entries []descriptor.Entry
		want    string
	}{
		{"", entries("key", "value"), "domain_key_value_"},
		{"prefix:", entries("key", "value"), "prefix:domain_key_value_"},
		{"", entries("parent", "value1", "files", "nested/a"), "domain_parent_value1_files_nested/*_"},
		{"", entries("parent", "value1", "files", "nested/b"), "domain_parent_value1_files_nested/*_"},
		{"", entries("files", "top/x", "files", "nested/y"), "domain_files_top/*_files_nested/*_"},
	} {
		m := d.MatchEnvoyproxy(c.entries)
		if m.Limit == nil {
			t.Fatalf("MatchEnvoyproxy(%v): no limit", c.entries)
		}
		if got := descriptor.EnvoyproxyKey(c.prefix, "domain", c.entries, m); got != c.want {
			t.Errorf("EnvoyproxyKey(%q, %v) = %q, want %q", c.prefix, c.entries, got, c.want)
		}
	}
}

// TestAddEnvoyproxy: a duplicate is a composite key seen before at the
// level, as envoyproxy/ratelimit refuses them.
func TestAddEnvoyproxy(t *testing.T) {
	for _, c := range []struct{ a, b descriptor.Node }{
		{descriptor.Node{Key: "x", Value: "y_z"}, descriptor.Node{Key: "x_y", Value: "z"}},
		{descriptor.Node{Key: "x_y"}, descriptor.Node{Key: "x", Value: "y"}},
		{descriptor.Node{Key: "k", Value: "v*"}, descriptor.Node{Key: "k", Value: "v*"}},
	} {
		d := descriptor.NewDomain("d", "d.yaml")
		a, b := c.a, c.b
		if d.AddEnvoyproxy(&a) != nil || d.AddEnvoyproxy(&b) == nil {
			t.Errorf("AddEnvoyproxy(%s) after %s: no duplicate", b.Composite(), a.Composite())
		}
	}
}

// TestCompileEnvoyproxy: under Options.Envoyproxy, envoyproxy/ratelimit's
// keys and bounds: no cap on descriptors, entries or lengths, unknown
// domains compile into nothing, hits_addend up to 2^63-1, overrides past
// the cap compiled afresh rather than refused.
func TestCompileEnvoyproxy(t *testing.T) {
	d := envoyDomain(t, &descriptor.Node{Key: "k", Limit: lim(t, "k", 5)})
	cfg, err := descriptor.NewConfig([]*descriptor.Domain{d}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := descriptor.NewCompiler(cfg, descriptor.Options{Envoyproxy: true, KeyPrefix: "rl:", MaxOverrides: 1})
	var p descriptor.Plan
	huge := uint64(math.MaxInt64)
	long := string(make([]byte, 5000))
	var many []descriptor.Descriptor
	for range 100 {
		many = append(many, descriptor.Descriptor{Entries: entries("k", "v")})
	}
	deep := descriptor.Descriptor{}
	for range 40 {
		deep.Entries = append(deep.Entries, descriptor.Entry{Key: "a"})
	}
	for _, req := range []*descriptor.Request{
		{Domain: "domain", Descriptors: many},
		{Domain: "domain", Descriptors: []descriptor.Descriptor{deep, {}, {Entries: entries("", "v")}}},
		{Domain: "domain", Descriptors: []descriptor.Descriptor{{Entries: entries("k", long)}}},
		{Domain: "domain", Descriptors: []descriptor.Descriptor{{Entries: entries("k", "v"), Hits: &huge}}},
		{Domain: "nowhere", Descriptors: []descriptor.Descriptor{{Entries: entries("k", "v"), Override: &descriptor.Override{RequestsPerUnit: 1, Unit: descriptor.Second}}}},
		{Domain: "domain", Descriptors: []descriptor.Descriptor{{Entries: entries("k", "a"), Override: &descriptor.Override{RequestsPerUnit: 1, Unit: descriptor.Second}}}},
		{Domain: "domain", Descriptors: []descriptor.Descriptor{{Entries: entries("k", "b"), Override: &descriptor.Override{RequestsPerUnit: 2, Unit: descriptor.Second}}}},
	} {
		if err := c.Compile(req, time.Time{}, &p); err != nil {
			t.Errorf("Compile(%s, %d descriptors) = %v", req.Domain, len(req.Descriptors), err)
		}
	}
	if err := c.Compile(&descriptor.Request{Domain: "domain", Descriptors: []descriptor.Descriptor{{Entries: entries("k", "v")}}}, time.Time{}, &p); err != nil || p.Hits[0].Key != "rl:domain_k_v_" {
		t.Errorf("Compile: key %q, %v; want rl:domain_k_v_", p.Hits[0].Key, err)
	}
	over := uint64(math.MaxInt64) + 1
	for _, req := range []*descriptor.Request{
		{Domain: "", Descriptors: []descriptor.Descriptor{{Entries: entries("k", "v")}}},
		{Domain: "domain"},
		{Domain: "domain", Descriptors: []descriptor.Descriptor{{Entries: entries("k", "v"), Hits: &over}}},
		{Domain: "domain", Descriptors: []descriptor.Descriptor{{Entries: entries("k", "v"), Override: &descriptor.Override{RequestsPerUnit: 1}}}},
	} {
		if err := c.Compile(req, time.Time{}, &p); err == nil {
			t.Errorf("Compile(%+v): no error", req)
		}
	}
}

// TestNewLimitEnvoyproxy: what envoyproxy/ratelimit accepts and Portero's
// own limits do not.
func TestNewLimitEnvoyproxy(t *testing.T) {
	for _, s := range []descriptor.LimitSpec{
		{FullKey: "d.k", Unit: descriptor.Second, RequestsPerUnit: math.MaxUint32},
		{Name: "límite \"x\"", Unit: descriptor.Minute, RequestsPerUnit: 5},
	} {
		if _, err := descriptor.NewLimit(s); err == nil {
			t.Errorf("NewLimit(%+v) without Envoyproxy: no error", s)
		}
		s.Envoyproxy = true
		if _, err := descriptor.NewLimit(s); err != nil {
			t.Errorf("NewLimit(%+v) = %v", s, err)
		}
	}
}

// TestMatchEnvoyproxyAllocs: matching allocates only the shared patterns'
// slice, and nothing without share_threshold: the composite names are
// built when the configuration loads, not per request.
func TestMatchEnvoyproxyAllocs(t *testing.T) {
	d := envoyDomain(t,
		&descriptor.Node{Key: "files", Value: "files/*", ShareThreshold: true, Limit: lim(t, "files", 10)},
		&descriptor.Node{Key: "wild", Value: "foo*", Limit: lim(t, "wild", 20)},
	)
	for _, c := range []struct {
		entries []descriptor.Entry
		want    float64
	}{
		{entries("files", "files/a.pdf"), 1},
		{entries("wild", "foo1"), 0},
	} {
		var m descriptor.Match
		got := testing.AllocsPerRun(100, func() { m = d.MatchEnvoyproxy(c.entries) })
		if m.Limit == nil {
			t.Fatalf("MatchEnvoyproxy(%v): no limit", c.entries)
		}
		if got != c.want {
			t.Errorf("allocations of MatchEnvoyproxy(%v) = %v, want %v", c.entries, got, c.want)
		}
	}
}

// TestKeyAllocs: a store key is built in one allocation, the key itself
// (one per counted descriptor on the decision path).
func TestKeyAllocs(t *testing.T) {
	es := entries("remote_address", "10.0.0.1", "path", "/a/b/c") // over 32 bytes: not on the stack
	var m descriptor.Match
	for _, c := range []struct {
		name string
		f    func() string
	}{
		{"StoreKey", func() string { return descriptor.StoreKey("edge", es, m) }},
		{"EnvoyproxyKey", func() string { return descriptor.EnvoyproxyKey("prefix:", "edge", es, m) }},
	} {
		var k string
		if got := testing.AllocsPerRun(100, func() { k = c.f() }); got != 1 {
			t.Errorf("allocations of %s = %v (key %q), want 1", c.name, got, k)
		}
	}
}

// TestStoreKeyForm: the exact keys, escapes and shared patterns included
// (they name counters in Redis: a change would lose them on upgrade).
func TestStoreKeyForm(t *testing.T) {
	d := descriptor.NewDomain("d", "d.yaml")
	d.Add(&descriptor.Node{Key: "f", Value: "x|*", ShareThreshold: true, Limit: lim(t, "f", 1)})
	for _, c := range []struct {
		domain string
		es     []descriptor.Entry
		want   string
	}{
		{"d", entries("a", "b"), `d|a=b`},
		{"d|=", entries("a|b", `c=\`, "k", ""), `d\|\=|a\|b=c\=\\|k=`},
		{"d", entries("f", "x|y"), `d|f=\*x\|*`},
	} {
		if got := descriptor.StoreKey(c.domain, c.es, d.Match(c.es)); got != c.want {
			t.Errorf("StoreKey(%q, %v) = %q, want %q", c.domain, c.es, got, c.want)
		}
	}
}
