package envoyconf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portero-rl/portero/descriptor"
)

// TestEnvoyproxyConfigTests is the port of envoyproxy/ratelimit's config
// tests (test/config/config_test.go) and of what its parser accepts and
// refuses beyond them: each directory of testdata/envoyproxy is one case,
// in files written for Portero; envoyproxy says whether envoyproxy/ratelimit
// v2's config check accepts it (checked with its config_check_cmd, built
// from its source, on these very directories), portero what Portero's own
// mode does. Under Options.Envoyproxy the loader must answer as
// envoyproxy/ratelimit in every case but portero_extension, Portero's own
// rate_limit.portero, which it accepts in both modes (envoyproxy/ratelimit
// refuses the key).
func TestEnvoyproxyConfigTests(t *testing.T) {
	cases := []struct {
		dir                 string
		merge               bool
		envoyproxy, portero bool // accepted
	}{
		// Its test/config cases, in files of our own.
		{"bad_limit_unit", false, false, false},
		{"bad_yaml", false, false, false},
		{"basic_config", false, true, true},
		{"duplicate_domain", false, false, false},
		{"duplicate_key", false, false, false},
		{"empty_domain", false, false, false},
		{"empty_key", false, false, false},
		{"merge_domain", true, true, true},
		{"merge_duplicate_key", true, false, false},
		{"metadata", false, true, true},
		{"misspelled_key", false, false, false},
		{"misspelled_key2", false, false, false},
		{"non_map_list", false, false, false},
		{"non_string_key", false, false, false},
		{"quota_mode", false, true, true},
		{"replaces_empty", false, false, false},
		{"replaces_self", false, false, false},
		{"shadow_mode", false, true, true},
		{"share_threshold", false, true, true},
		{"share_threshold_without_wildcard", false, false, false},
		{"unlimited_with_unit", false, false, false},
		{"wildcard", false, true, true},
		// Beyond them: what its yaml.v2 parser and key check accept and refuse.
		{"anchors", false, true, true},
		{"bool_value", false, true, true},
		{"comments_only", false, false, false},
		{"descriptors_scalar", false, false, false},
		{"domain_only", false, true, true},
		{"duplicate_key_only", false, false, false},
		{"duplicate_mapping_key", false, true, false},
		{"duplicate_rate_limit", false, true, false},
		{"duplicate_wildcard", false, false, false},
		{"empty_descriptors", false, true, true},
		{"empty_file", false, false, false},
		{"empty_rate_limit", false, false, false},
		{"empty_value_is_key_only", false, false, false},
		{"float_requests_per_unit", false, false, false},
		// yaml.v2 reads 0x10 as 16; Portero's mode takes decimal digits
		// only, as Portero's own file does (fileerr.Whole).
		{"hex_requests_per_unit", false, true, false},
		{"key_value_collision", false, false, true},
		{"max_requests_per_unit", false, true, false},
		{"merge_key", false, true, true},
		{"metadata_any", false, true, true},
		{"metadata_scalar", false, false, false},
		{"misplaced_known_key", false, true, false},
		{"negative_requests_per_unit", false, false, false},
		{"no_requests_per_unit", false, true, true},
		{"null_key", false, false, false},
		{"null_rate_limit", false, true, true},
		{"number_domain", false, true, true},
		{"number_key", false, true, true},
		{"over_max_requests_per_unit", false, false, false},
		{"portero_extension", false, false, true},
		{"quoted_bool", false, false, true},
		{"quoted_number", false, false, true},
		{"rate_limit_list", false, false, false},
		{"replaces_extra_key", false, true, false},
		{"replaces_without_name", false, false, false},
		{"shadow_without_limit", false, true, true},
		{"tab_indent", false, false, false},
		{"toplevel_known_key", false, true, false},
		{"two_documents", false, true, false},
		{"underscore_collision", false, false, true},
		{"unicode_name", false, true, false},
		{"unit_case", false, true, true},
		{"unit_unknown", false, false, false},
		{"unlimited_bad_unit", false, true, false},
		{"unlimited_empty_unit", false, true, false},
		{"unnamed_replaces", false, true, true},
		{"wildcard_middle", false, true, true},
		{"year", false, true, true},
		{"yes_bool", false, true, true},
	}
	dirs, err := os.ReadDir("testdata/envoyproxy")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != len(cases) {
		t.Errorf("%d directories in testdata/envoyproxy, %d cases", len(dirs), len(cases))
	}
	for _, c := range cases {
		t.Run(c.dir, func(t *testing.T) {
			path := filepath.Join("testdata/envoyproxy", c.dir)
			for _, compat := range []bool{true, false} {
				want := c.portero
				if compat {
					// The one deliberate difference: Portero's extension.
					want = c.envoyproxy || c.dir == "portero_extension"
				}
				cfg, err := Load(path, Options{Envoyproxy: compat, MergeDomains: c.merge})
				if got := err == nil; got != want {
					t.Errorf("Load(%s, Envoyproxy: %v) accepted = %v, want %v (error: %v)", c.dir, compat, got, want, err)
					continue
				}
				if err != nil {
					// Refusals name the file, as every configuration error does.
					if !strings.Contains(err.Error(), path+string(filepath.Separator)) {
						t.Errorf("Load(%s, Envoyproxy: %v) error does not name the file: %v", c.dir, compat, err)
					}
				} else if len(cfg.Domains()) == 0 {
					t.Errorf("Load(%s, Envoyproxy: %v): no domain", c.dir, compat)
				}
			}
		})
	}
}

// TestEnvoyproxyFiles: under Options.Envoyproxy a directory is read as
// goruntime reads envoyproxy/ratelimit's: every file whatever its name, in
// subdirectories too, dot files unless IgnoreDotFiles, and an empty
// directory is a configuration without domains.
func TestEnvoyproxyFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, domain string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("domain: "+domain+"\ndescriptors: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("limits.conf", "conf")
	write(".hidden.yaml", "hidden")
	write(".dot/inner.yaml", "dotdir")
	write("sub/nested", "nested")
	write("edge.yaml", "edge")
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Envoyproxy: true}, "conf,dotdir,edge,hidden,nested"},
		{Options{Envoyproxy: true, IgnoreDotFiles: true}, "conf,edge,nested"},
		{Options{}, "edge"},
	} {
		cfg, err := Load(dir, c.opts)
		if err != nil {
			t.Fatalf("Load(%+v) = %v", c.opts, err)
		}
		if got := strings.Join(cfg.Domains(), ","); got != c.want {
			t.Errorf("Load(%+v) domains = %s, want %s", c.opts, got, c.want)
		}
	}
	empty := t.TempDir()
	if cfg, err := Load(empty, Options{Envoyproxy: true}); err != nil || len(cfg.Domains()) != 0 {
		t.Errorf("an empty directory under Envoyproxy: %v, %v; want no domains and no error", cfg.Domains(), err)
	}
	if _, err := Load(empty, Options{}); err == nil {
		t.Error("an empty directory: no error")
	}
	// A README among the files is YAML to envoyproxy/ratelimit too.
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("Limits for the edge.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, Options{Envoyproxy: true}); err == nil || !strings.Contains(err.Error(), "README") {
		t.Errorf("a README under Envoyproxy: %v, want an error naming it", err)
	}
}

// TestMetadataAndQuota: metadata is kept with JSON's kinds of values, as
// envoyproxy/ratelimit's protobuf Struct holds it; quota_mode marks the
// node and its limit's rule, and Options.QuotaMode every limit.
func TestMetadataAndQuota(t *testing.T) {
	src := `domain: d
descriptors:
  - key: service
    value: one
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      1: one
      name: svc
      tier: {level: 3, gold: yes, ratio: 0.5, none: null, quoted: "no"}
      list: [1, two]
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	for _, compat := range []bool{false, true} {
		for _, global := range []bool{false, true} {
			cfg, err := Parse([]Source{{Name: "d.yaml", Data: []byte(src)}}, Options{Envoyproxy: compat, QuotaMode: global})
			if err != nil {
				t.Fatal(err)
			}
			d := cfg.Domain("d")
			one := d.Match(entries("service", "one")).Node
			want := map[string]any{"1": "one", "name": "svc", "list": []any{1.0, "two"},
				"tier": map[string]any{"level": 3.0, "gold": true, "ratio": 0.5, "none": nil, "quoted": "no"}}
			if fmt.Sprint(one.Metadata) != fmt.Sprint(want) {
				t.Errorf("metadata = %v, want %v", one.Metadata, want)
			}
			if !one.QuotaMode || !one.Limit.Rule.QuotaMode {
				t.Errorf("quota_mode: node %v, rule %v", one.QuotaMode, one.Limit.Rule.QuotaMode)
			}
			if plain := d.Match(entries("plain", "x")).Limit; plain.Rule.QuotaMode != global {
				t.Errorf("QuotaMode %v: plain's rule quota = %v", global, plain.Rule.QuotaMode)
			}
		}
	}
}

// TestMetadataDuplicateKeys: a key given twice in metadata is its last
// value under Options.Envoyproxy, as yaml.v2 decodes a mapping into the
// map envoyproxy/ratelimit reads (nested mappings too), and an error in
// Portero's own mode, as every key given twice is.
func TestMetadataDuplicateKeys(t *testing.T) {
	src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n" +
		"    metadata:\n      x: 1\n      x: 2\n      m: {a: first, a: last}\n"
	cfg, err := Parse([]Source{{Name: "d.yaml", Data: []byte(src)}}, Options{Envoyproxy: true})
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Domain("d").Match(entries("k", "v")).Node.Metadata
	if want := map[string]any{"x": 2.0, "m": map[string]any{"a": "last"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metadata under Envoyproxy = %v, want %v", got, want)
	}
	if _, err := Parse([]Source{{Name: "d.yaml", Data: []byte(src)}}, Options{}); err == nil || !strings.Contains(err.Error(), "d.yaml:7") || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("metadata with a key given twice in Portero's mode: %v, want an error at d.yaml:7", err)
	}
}

// TestMergeKeysAndRepeats: a mapping merged with << and a key given twice
// read as each mode's rule says (yamlwalk.Rules): under Options.Envoyproxy
// as yaml.v2 decodes envoyproxy/ratelimit's structs (keys in order, a
// mapping given again adding to the first), in Portero's mode with the
// mapping's own keys winning and a key given twice refused.
func TestMergeKeysAndRepeats(t *testing.T) {
	limit := func(cfg *descriptor.Config, key string) string {
		m := cfg.Domain("d").Match(entries(key, "v"))
		if m.Limit == nil {
			return "none"
		}
		return fmt.Sprintf("%d/%s", m.Limit.RequestsPerUnit, m.Limit.Unit)
	}
	for _, tt := range []struct {
		src              string
		envoyproxy, ours string // the limits of a and b, or the error
	}{
		{"descriptors:\n  - &x {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n  - {<<: *x, key: b}\n", "1/second 1/second", "1/second 1/second"},
		// yaml.v2 applies a merge where it stands: after the own key, it wins.
		{"descriptors:\n  - {key: b, <<: {key: a, rate_limit: {unit: minute, requests_per_unit: 2}}}\n", "2/minute none", "none 2/minute"},
		{"descriptors:\n  - {key: a, rate_limit: {unit: hour}, rate_limit: {requests_per_unit: 3}}\n", "3/hour none", "given twice"},
		{"descriptors:\n  - &x {key: c, rate_limit: {unit: day, requests_per_unit: 4}}\n  - {<<: *x, key: a, rate_limit: {unit: second}}\n", "4/second none", "0/second none"},
	} {
		for _, compat := range []bool{true, false} {
			want := tt.ours
			if compat {
				want = tt.envoyproxy
			}
			cfg, err := Parse([]Source{{Name: "d.yaml", Data: []byte("domain: d\n" + tt.src)}}, Options{Envoyproxy: compat})
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = limit(cfg, "a") + " " + limit(cfg, "b")
			}
			if !strings.Contains(got, want) {
				t.Errorf("Envoyproxy %v, %q: %s, want %s", compat, tt.src, got, want)
			}
		}
	}
}

// TestAliasesBounded: descriptors that repeat each other ten times over
// nine levels through YAML aliases (10⁹ descriptors) are refused at the
// bound of values, in both modes, envoyproxy/ratelimit's key check too.
func TestAliasesBounded(t *testing.T) {
	src := "domain: d\ndescriptors:\n  - &m0 {key: k0}\n"
	for i := 1; i <= 9; i++ {
		src += fmt.Sprintf("  - &m%d {key: k%d, descriptors: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*m%d, ", i-1), 10), ", "))
	}
	for _, compat := range []bool{true, false} {
		_, err := Parse([]Source{{Name: "bomb.yaml", Data: []byte(src)}}, Options{Envoyproxy: compat})
		if err == nil || !strings.Contains(err.Error(), "more than 1000000 values once YAML aliases are expanded") {
			t.Errorf("Envoyproxy %v: %v", compat, err)
		}
	}
}
