package envoyconf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
)

const examples = "../../../examples/envoy/config"

func loadExamples(t *testing.T) *descriptor.Config {
	t.Helper()
	c, err := Load(examples, Options{})
	if err != nil {
		t.Fatalf("Load(%s) = %v", examples, err)
	}
	return c
}

func entries(kv ...string) []descriptor.Entry {
	var es []descriptor.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, descriptor.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func TestLoadDirectory(t *testing.T) {
	c := loadExamples(t)
	if got, want := strings.Join(c.Domains(), ","), "api,edge,messaging"; got != want {
		t.Errorf("Domains() = %s, want %s", got, want)
	}
	if got := len(c.Files()); got != 3 {
		t.Errorf("Files() has %d files, want 3", got)
	}
}

// TestMatchExamples looks descriptors up in the example configs: ones that
// match, partly match (a prefix of a deeper rule, or deeper than any rule)
// and do not match at all.
func TestMatchExamples(t *testing.T) {
	c := loadExamples(t)
	tests := []struct {
		domain  string
		entries []descriptor.Entry
		want    string // PolicyName of the limit, "" for no limit
		rpu     uint32
		unit    descriptor.Unit
		shadow  bool
		unlim   bool
	}{
		// Key-only default.
		{"edge", entries("remote_address", "10.0.0.1"), "edge.remote_address", 10, descriptor.Second, false, false},
		// Exact value beats the key-only default.
		{"edge", entries("remote_address", "50.0.0.5"), "edge.remote_address_50.0.0.5", 0, descriptor.Second, false, false},
		// Two levels: exact value at level 2.
		{"edge", entries("api_key", "k1", "plan", "gold"), "gold", 600, descriptor.Minute, false, false},
		{"edge", entries("api_key", "k1", "plan", "free"), "free", 60, descriptor.Minute, false, false},
		// Two levels: key-only default at level 2.
		{"edge", entries("api_key", "k1", "plan", "silver"), "edge.api_key.plan", 30, descriptor.Minute, false, false},
		// Partial: a prefix of a two-level rule has no limit of its own.
		{"edge", entries("api_key", "k1"), "", 0, 0, false, false},
		// Partial: deeper than any rule.
		{"edge", entries("remote_address", "10.0.0.1", "plan", "gold"), "", 0, 0, false, false},
		{"edge", entries("api_key", "k1", "plan", "gold", "x", "y"), "", 0, 0, false, false},
		// Wildcard anywhere in the value, shadow mode.
		{"edge", entries("path", "/api/v2/export"), "edge.path_/api/*/export", 100, descriptor.Hour, true, false},
		{"edge", entries("path", "/api/v2/import"), "", 0, 0, false, false},
		{"edge", entries("path", "/api/export"), "", 0, 0, false, false},
		// Unlimited.
		{"edge", entries("internal", "true"), "edge.internal", 0, 0, false, true},
		// No match.
		{"edge", entries("unknown", "x"), "", 0, 0, false, false},
		{"edge", nil, "", 0, 0, false, false},
		// Nested with a value at level 1.
		{"messaging", entries("message_type", "marketing", "to_number", "+34600"), "messaging.message_type_marketing.to_number", 5, descriptor.Day, false, false},
		{"messaging", entries("message_type", "transactional", "to_number", "+34600"), "", 0, 0, false, false},
		{"messaging", entries("to_number", "+34600"), "messaging.to_number", 100, descriptor.Day, false, false},
		// Prefix wildcard.
		{"messaging", entries("sender", "bulk-news"), "bulk_sender", 50, descriptor.Second, false, false},
		{"messaging", entries("sender", "alice"), "all_senders", 1000, descriptor.Second, false, false},
		// Extensions.
		{"api", entries("user", "u1"), "per_user", 10, descriptor.Second, false, false},
		{"api", entries("login", "", "remote_address", "10.1.1.1"), "login_per_ip", 5, descriptor.Minute, false, false},
		{"api", entries("plan", "trial", "user", "u1"), "trial_daily", 1000, descriptor.Day, false, false},
		{"api", entries("plan", "paid", "user", "u1"), "", 0, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s", tt.domain, descriptor.Key(tt.entries)), func(t *testing.T) {
			d := c.Domain(tt.domain)
			if d == nil {
				t.Fatalf("Domain(%q) = nil", tt.domain)
			}
			m := d.Match(tt.entries)
			if tt.want == "" {
				if m.Limit != nil {
					t.Fatalf("Match(%v).Limit = %q, want none", tt.entries, m.Limit.PolicyName())
				}
				return
			}
			if m.Limit == nil {
				t.Fatalf("Match(%v).Limit = nil, want %q", tt.entries, tt.want)
			}
			l := m.Limit
			if l.PolicyName() != tt.want || l.RequestsPerUnit != tt.rpu || l.Unit != tt.unit || l.Unlimited != tt.unlim {
				t.Errorf("Match(%v) = %s %d/%s unlimited=%t, want %s %d/%s unlimited=%t",
					tt.entries, l.PolicyName(), l.RequestsPerUnit, l.Unit, l.Unlimited, tt.want, tt.rpu, tt.unit, tt.unlim)
			}
			if m.Node.ShadowMode != tt.shadow {
				t.Errorf("ShadowMode = %t, want %t", m.Node.ShadowMode, tt.shadow)
			}
		})
	}
}

func TestRulesAndExtension(t *testing.T) {
	c := loadExamples(t)
	tests := []struct {
		domain  string
		entries []descriptor.Entry
		alg     portero.Algorithm
		limit   portero.Limit
		maxCost int64
	}{
		{"edge", entries("remote_address", "1"), portero.FixedWindow, portero.Limit{Count: 10, Window: time.Second}, 10},
		{"edge", entries("api_key", "k", "plan", "gold"), portero.FixedWindow, portero.Limit{Count: 600, Window: time.Minute}, 600},
		{"api", entries("user", "u"), portero.TokenBucket, portero.Limit{Count: 10, Window: time.Second, Burst: 40}, 40},
		{"api", entries("tenant", "t"), portero.SlidingCounter, portero.Limit{Count: 1000, Window: time.Minute}, 1000},
		{"api", entries("login", "", "remote_address", "a"), portero.GCRA, portero.Limit{Count: 5, Window: time.Minute, Burst: 2}, 2},
	}
	for _, tt := range tests {
		m := c.Domain(tt.domain).Match(tt.entries)
		if m.Limit == nil {
			t.Fatalf("%s %v: no limit", tt.domain, tt.entries)
		}
		r := m.Limit.Rule
		if r.Algorithm != tt.alg || r.Limit != tt.limit || r.MaxCost() != tt.maxCost {
			t.Errorf("%s %v: rule %v %v max %d, want %v %v max %d", tt.domain, tt.entries, r.Algorithm, r.Limit, r.MaxCost(), tt.alg, tt.limit, tt.maxCost)
		}
		if err := r.Validate(); err != nil {
			t.Errorf("%s %v: rule invalid: %v", tt.domain, tt.entries, err)
		}
	}
	blocked := c.Domain("edge").Match(entries("remote_address", "50.0.0.5")).Limit
	if !blocked.Blocked() {
		t.Errorf("requests_per_unit 0: Blocked() = false, want true")
	}
}

func TestStoreKey(t *testing.T) {
	c := loadExamples(t)
	d := c.Domain("messaging")
	a := entries("sender", "bulk-a")
	b := entries("sender", "bulk-b")
	ka, kb := descriptor.StoreKey("messaging", a, d.Match(a)), descriptor.StoreKey("messaging", b, d.Match(b))
	if ka != kb {
		t.Errorf("share_threshold: keys %q and %q differ, want one shared counter", ka, kb)
	}
	x := entries("sender", "alice")
	y := entries("sender", "bob")
	if descriptor.StoreKey("messaging", x, d.Match(x)) == descriptor.StoreKey("messaging", y, d.Match(y)) {
		t.Errorf("key-only match: two values share a key")
	}
	// Escaping keeps distinct descriptors apart.
	pairs := [][2][]descriptor.Entry{
		{entries("a", "b|c=d"), entries("a", "b", "c", "d")},
		{entries("a=b", "c"), entries("a", "b=c")},
		{entries("a", `\*x`), entries("a", "*x")},
	}
	for _, p := range pairs {
		k1, k2 := descriptor.StoreKey("d", p[0], descriptor.Match{}), descriptor.StoreKey("d", p[1], descriptor.Match{})
		if k1 == k2 {
			t.Errorf("StoreKey(%v) = StoreKey(%v) = %q", p[0], p[1], k1)
		}
	}
	if k1, k2 := descriptor.StoreKey("d|a", entries("b", "c"), descriptor.Match{}), descriptor.StoreKey("d", entries("a|b", "c"), descriptor.Match{}); k1 == k2 {
		t.Errorf("domain and key run together: %q", k1)
	}
}

func TestWildcardOrder(t *testing.T) {
	// Wildcards are tried in file order, after the exact value and before
	// the key-only default.
	c, err := Parse([]Source{{Name: "w.yaml", Data: []byte(`
domain: w
descriptors:
  - {key: k, value: "ab*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "a*", rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: k, value: "abc", rate_limit: {unit: second, requests_per_unit: 3}}
  - {key: k, rate_limit: {unit: second, requests_per_unit: 4}}
`)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]uint32{"abc": 3, "abd": 1, "ax": 2, "b": 4} {
		m := c.Domain("w").Match(entries("k", v))
		if m.Limit == nil || m.Limit.RequestsPerUnit != want {
			t.Errorf("value %q: got %v, want %d per second", v, m.Limit, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string // substring of the error, including file:line
	}{
		{"empty", "", "x.yaml: domain: empty file"},
		{"no domain", "descriptors: []\n", "x.yaml:1:1: domain: missing or empty domain"},
		{"unknown top", "domain: d\nfoo: 1\n", "x.yaml:2:1: foo: unknown field"},
		{"unknown nested", "domain: d\ndescriptors:\n  - key: k\n    valeu: v\n", "x.yaml:4:5: descriptors[0].valeu: unknown field"},
		{"did you mean", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, request_per_unit: 1}\n", "x.yaml:4:32: descriptors[0].rate_limit.request_per_unit: unknown field; did you mean requests_per_unit?"},
		{"known here", "domainn: d\nfoo: 1\n", "x.yaml:2:1: foo: unknown field (known here: domain, descriptors, portero)"},
		{"empty key", "domain: d\ndescriptors:\n  - key: ''\n", "x.yaml:3:10: descriptors[0].key: empty key"},
		{"missing key", "domain: d\ndescriptors:\n  - value: v\n", "x.yaml:3:5: descriptors[0].key: missing key"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `x.yaml:4:24: descriptors[0].rate_limit.unit: invalid unit "fortnight"`},
		{"missing unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", "x.yaml:4:17: descriptors[0].rate_limit.unit: missing unit"},
		{"unit with unlimited", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unlimited: true}\n", "descriptors[0].rate_limit.unit: should not be given when unlimited"},
		{"negative rpu", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", `x.yaml:4:51: descriptors[0].rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, found "-1"`},
		{"huge rpu", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", "requests_per_unit: want a whole number"},
		// A whole number is decimal digits, as in Portero's own file:
		// yaml.v3 would read 010 as 8 and 1_000 as 1000.
		{"octal rpu", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 010}\n", `x.yaml:4:51: descriptors[0].rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, found "010"`},
		{"grouped rpu", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1_000}\n", `found "1_000"`},
		{"grouped burst", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, portero: {algorithm: token-bucket, burst: 0x10}}\n", `rate_limit.portero.burst: want a whole number from 0 to 4294967295, found "0x10"`},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n  - key: k\n", `x.yaml:4:5: descriptors[1]: duplicate descriptor "k" at this level (first at line 3)`},
		{"duplicate value", "domain: d\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n", `duplicate descriptor "k_v"`},
		{"self replace", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, unit: second, requests_per_unit: 1, replaces: [{name: a}]}\n", "replaces: a limit cannot replace itself"},
		{"empty replace", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "replaces[0].name: empty name"},
		{"bad bool", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", `descriptors[0].shadow_mode: want true or false, found "maybe"`},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, portero: {algorithm: magic}}\n", `rate_limit.portero.algorithm: unknown algorithm "magic"`},
		{"queue", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, portero: {algorithm: leaky-queue}}\n", "x.yaml:4:75: descriptors[0].rate_limit.portero.algorithm: leaky-queue delays requests, which an Envoy rate limit service cannot do"},
		{"burst on window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, portero: {burst: 5}}\n", "portero.burst: burst applies to token-bucket"},
		{"share without wildcard", "domain: d\ndescriptors:\n  - {key: k, value: v, share_threshold: true}\n", "share_threshold: only valid with a wildcard"},
		{"not a list", "domain: d\ndescriptors: {key: k}\n", "x.yaml:2:14: descriptors: want a list of descriptors, found a mapping"},
		{"bad yaml", "domain: d\ndescriptors:\n  - key: [\n", "x.yaml:3: invalid YAML"},
		// A tab in the indentation is found where it is (the library
		// names the line before), and named.
		{"tab", "domain: d\ndescriptors:\n  - key: k\n\t  value: v\n", "x.yaml:4:1: invalid YAML: found a tab character that violates indentation: YAML indents with spaces only, never with tabs"},
		{"two docs", "domain: d\n---\ndomain: e\n", "more than one YAML document"},
		{"scalar file", "hello\n", "the file must be a mapping"},
		{"duplicate field", "domain: d\ndomain: e\n", "x.yaml:2:1: domain: given twice"},
		{"name not an sf-string", "domain: d\ndescriptors:\n  - key: path\n    value: /café\n    rate_limit: {unit: second, requests_per_unit: 1}\n", `x.yaml:5:17: descriptors[0].rate_limit: name "d.path_/café" cannot appear in a RateLimit header (printable ASCII only)`},
		{"given name not an sf-string", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: \"tab\\there\", unit: second, requests_per_unit: 1}\n", `descriptors[0].rate_limit: name "tab\there" cannot appear`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]Source{{Name: "x.yaml", Data: []byte(tt.yaml)}}, Options{})
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want %q", tt.yaml, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse(%q) = %q, want it to contain %q", tt.yaml, err, tt.want)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not an *Error", err)
			}
		})
	}
}

func TestDuplicateDomains(t *testing.T) {
	a := Source{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - {key: x, rate_limit: {unit: second, requests_per_unit: 1}}\n")}
	b := Source{Name: "b.yaml", Data: []byte("domain: d\ndescriptors:\n  - {key: y, rate_limit: {unit: second, requests_per_unit: 2}}\n")}
	if _, err := Parse([]Source{a, b}, Options{}); err == nil || !strings.Contains(err.Error(), `b.yaml:1:9: domain: duplicate domain "d" (also in a.yaml)`) {
		t.Fatalf("Parse(duplicate domains) = %v, want a duplicate-domain error", err)
	}
	c, err := Parse([]Source{a, b}, Options{MergeDomains: true})
	if err != nil {
		t.Fatalf("Parse(merge) = %v", err)
	}
	for k, want := range map[string]uint32{"x": 1, "y": 2} {
		if m := c.Domain("d").Match(entries(k, "v")); m.Limit == nil || m.Limit.RequestsPerUnit != want {
			t.Errorf("merged domain, key %s: %v, want %d", k, m.Limit, want)
		}
	}
	if _, err := Parse([]Source{a, a}, Options{MergeDomains: true}); err == nil || !strings.Contains(err.Error(), `duplicate descriptor "x" in merged domain`) {
		t.Errorf("merging a duplicate descriptor: %v", err)
	}
}

func TestLoadFileAndErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("domain: g\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(good, Options{}); err != nil || c.Domain("g") == nil {
		t.Fatalf("Load(file) = %v, %v", c, err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml"), Options{}); err == nil {
		t.Error("Load(missing) = nil error")
	}
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "README"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(empty, Options{}); err == nil || !strings.Contains(err.Error(), "no .yaml or .yml files") {
		t.Errorf("Load(dir without yaml) = %v", err)
	}
	// Hidden files are skipped; bad files are reported with their path.
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	os.WriteFile(filepath.Join(dir, ".hidden.yaml"), []byte("garbage: ["), 0o644)
	os.WriteFile(filepath.Join(sub, "bad.yml"), []byte("domain: b\nrate: 1\n"), 0o644)
	_, err := Load(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(sub, "bad.yml")+":2:1: rate: unknown field") {
		t.Errorf("Load(dir with bad file) = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"edge.yaml", "messaging.yaml", "api.yaml"} {
		data, err := os.ReadFile(filepath.Join(examples, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - &a {key: k, descriptors: [*a]}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: k, value: '*a*', share_threshold: true, rate_limit: {unit: day}}\n"))
	// Small files that reach one path each, so that the fuzzer starts from
	// them rather than minimising the examples (see make fuzz).
	for _, src := range []string{
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - {key: k, value: v, shadow_mode: true, detailed_metric: yes, value_to_metric: no, rate_limit: {name: n, unit: MINUTE, requests_per_unit: 0x10}}\n",
		"domain: d\ndescriptors:\n  - {key: k, rate_limit: {unlimited: true}}\n  - {key: k, value: 'a*b', rate_limit: {unit: hour, requests_per_unit: 3, replaces: [{name: n}]}}\n",
		"domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 5, portero: {algorithm: gcra, burst: 9}}}\n",
		"domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 5, portero: {algorithm: leaky-queue}}}\n",
		"domain: d\nportero: {address_lists: {m: [10.0.0.0/8, '::1']}}\ndescriptors:\n  - {key: k, share_threshold: true, portero: {addresses: [m], not_addresses: [10.1.0.0/16]}, rate_limit: {unit: day, requests_per_unit: 5, portero: {calendar: true, tz: Europe/Madrid, offset: 6h}}}\n",
		"domain: d\ndescriptors:\n  - {key: k, rate_limit: {requests_per_unit: 50, portero: {look_back: 120s, algorithm: sliding-counter}}}\n",
		"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        descriptors: [{key: c, rate_limit: {unit: week, requests_per_unit: 1}}]\n",
		"domain: d\ndescriptors:\n  - {key: k}\n  - {key: k}\n  - {key: '', valeu: x, quota_mode: true}\n",
		"domain: d\ndescriptors: {key: k}\nfoo: 1\n",
		"domain: [d]\n---\ndomain: e\n",
		"",
		"descriptors: []\n",
	} {
		f.Add([]byte(src))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, compat := range []bool{false, true} {
			c, err := Parse([]Source{{Name: "f.yaml", Data: data}}, Options{Envoyproxy: compat})
			if err != nil {
				if c != nil {
					t.Fatal("config and error both non-nil")
				}
				if !strings.HasPrefix(err.Error(), "f.yaml") {
					t.Fatalf("error does not name the file: %v", err)
				}
				continue
			}
			for _, name := range c.Domains() {
				d := c.Domain(name)
				d.Match(entries("k", "v", "k", "v"))
				d.MatchEnvoyproxy(entries("k", "v", "k", "v"))
				walk(t, d.Nodes, 0, compat)
			}
		}
	})
}

func walk(t *testing.T, ds []*descriptor.Node, depth int, compat bool) {
	if depth > maxDepth+1 {
		t.Fatalf("tree deeper than %d", maxDepth)
	}
	for _, d := range ds {
		if d.Key == "" {
			t.Fatal("descriptor with empty key accepted")
		}
		// envoyproxy/ratelimit's counts need not be ones Portero's
		// algorithms can count (its CountEach counters count them).
		if r := d.Limit; r != nil && !r.Unlimited && !r.Blocked() && !compat {
			if err := r.Rule.Rule.Validate(); err != nil {
				t.Fatalf("accepted an invalid rule: %v", err)
			}
		}
		walk(t, d.Children, depth+1, compat)
	}
}

func ExampleParse() {
	c, err := Parse([]Source{{Name: "edge.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
`)}}, Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ip := range []string{"10.0.0.1", "50.0.0.5"} {
		m := c.Domain("edge").Match([]descriptor.Entry{{Key: "remote_address", Value: ip}})
		fmt.Printf("%s: %s %d/%s\n", ip, m.Limit.PolicyName(), m.Limit.RequestsPerUnit, m.Limit.Unit)
	}
	// Output:
	// 10.0.0.1: edge.remote_address 10/second
	// 50.0.0.5: edge.remote_address_50.0.0.5 0/second
}

// TestTabIndentFile: the real file of testdata/envoyproxy/tab_indent, in
// both modes, is refused at the tab with the reason.
func TestTabIndentFile(t *testing.T) {
	for _, compat := range []bool{false, true} {
		_, err := Load("testdata/envoyproxy/tab_indent", Options{Envoyproxy: compat})
		want := filepath.Join("testdata/envoyproxy/tab_indent", "a.yaml") + ":3:1: invalid YAML: found character that cannot start any token: YAML indents with spaces only, never with tabs"
		if err == nil || err.Error() != want {
			t.Errorf("Envoyproxy %v: %v, want %s", compat, err, want)
		}
	}
}
