package yamlwalk_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero/internal/config/yamlwalk"
)

// S is a mapping as a configuration struct holds one: mappings (A, B), a
// scalar (V) and a list (L).
type S struct {
	A *S     `yaml:"a"`
	B *S     `yaml:"b"`
	V string `yaml:"v"`
	L []S    `yaml:"l"`
}

// build reads n into an S by the rules, as the configuration readers do;
// ok is false when a problem was found.
func build(w *yamlwalk.Walker, n *yaml.Node, rules yamlwalk.Rules) (s S, ok bool) {
	ok = true
	if n, _ = w.Resolve(n); n == nil || n.Kind != yaml.MappingNode {
		return s, n != nil && yamlwalk.IsNull(n)
	}
	pairs, problems := w.Pairs(n, rules)
	ok = len(problems) == 0
	for _, p := range pairs {
		v := p.Value
		switch p.Key {
		case "a", "b":
			var child *S
			if !yamlwalk.IsNull(v) {
				c, cok := build(w, v, rules)
				child, ok = &c, ok && cok && v.Kind == yaml.MappingNode
			}
			if p.Key == "a" {
				s.A = child
			} else {
				s.B = child
			}
		case "v":
			if v.Kind != yaml.ScalarNode {
				ok = false
			} else if !yamlwalk.IsNull(v) {
				s.V = v.Value
			}
		case "l":
			s.L = nil
			if v.Kind == yaml.SequenceNode {
				s.L = []S{}
			} else if !yamlwalk.IsNull(v) {
				ok = false
			}
			for _, item := range v.Content {
				c, cok := build(w, item, rules)
				s.L, ok = append(s.L, c), ok && cok
			}
		}
	}
	return s, ok
}

func root(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil || len(doc.Content) == 0 {
		t.Skip("not YAML")
	}
	return doc.Content[0]
}

var rulesSeeds = []string{
	"v: p\nv: q\n",                                  // a scalar given twice
	"a: {v: p}\na: {l: [{v: q}]}\n",                 // a mapping given twice
	"l: [{v: p}]\nl: [{v: q}]\n",                    // a list given twice
	"a: {v: p}\na: ~\n",                             // nothing after a mapping
	"m: &m {v: p, a: {v: q}}\n<<: *m\nv: r\n",       // own key after a merge
	"m: &m {v: p, a: {v: q}}\nv: r\n<<: *m\n",       // own key before a merge
	"m: &m {a: {v: q, l: []}}\na: {v: r}\n<<: *m\n", // a merged mapping and the own
	"x: &x {v: p}\nz: &z {v: q, a: {v: s}}\n<<: [*x, *z]\n",
	"x: &x {v: p}\nz: &z {<<: *x, a: {}}\n<<: *z\n", // merges within merges
	"x: &x [p]\n<<: *x\n",                           // a merge of no mapping
	"<<: p\n",
	"x: &x {v: p}\na: *x\nb: {<<: *x, v: q}\n",
	"a: {v: p, v: q}\nl: [{<<: {v: p}}, {v: q, <<: {a: {v: s}}}]\n",
}

// FuzzPortero: what the Portero rules read is what yaml.v3 decodes into a
// struct (own keys before merged ones, the first merged mapping first, a
// key given twice refused).
func FuzzPortero(f *testing.F) {
	for _, s := range rulesSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		var want S
		werr := yaml.Unmarshal([]byte(src), &want)
		got, ok := build(&yamlwalk.Walker{}, root(t, src), yamlwalk.Portero)
		if werr == nil && ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: read %+v; yaml.v3 decodes %+v", src, got, want)
		}
		if werr == nil && !ok && !strings.Contains(src, "<<") {
			t.Fatalf("%q: refused; yaml.v3 decodes %+v", src, want)
		}
	})
}

// FuzzYAMLv2: what the YAMLv2 rules read is what yaml.v2, the reader of
// envoyproxy/ratelimit, decodes into a struct, and what YAMLv2Map reads
// what it decodes into a map.
func FuzzYAMLv2(f *testing.F) {
	for _, s := range rulesSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		var want S
		if err := yamlv2.Unmarshal([]byte(src), &want); err == nil {
			got, ok := build(&yamlwalk.Walker{}, root(t, src), yamlwalk.YAMLv2)
			if ok && !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: read %+v; yaml.v2 decodes %+v", src, got, want)
			}
		}
		var wantMap any
		if err := yamlv2.Unmarshal([]byte(src), &wantMap); err == nil {
			got, ok := shape(&yamlwalk.Walker{}, root(t, src))
			want, wok := shapeOf(wantMap)
			if ok && wok && fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%q: read %v; yaml.v2 decodes %v", src, got, want)
			}
		}
	})
}

// shape reads n by the YAMLv2Map rules into maps, lists and "s" for every
// scalar (nothing too: how scalars resolve is not the rules' business);
// shapeOf renders what yaml.v2 decodes likewise.
func shape(w *yamlwalk.Walker, n *yaml.Node) (any, bool) {
	n, _ = w.Resolve(n)
	switch {
	case n == nil:
		return nil, false
	case n.Kind == yaml.MappingNode:
		pairs, problems := w.Pairs(n, yamlwalk.YAMLv2Map)
		m, ok := map[string]any{}, len(problems) == 0
		for _, p := range pairs {
			v, vok := shape(w, p.Value)
			m[p.Key], ok = v, ok && vok && p.KeyNode.Tag == "!!str"
		}
		return m, ok
	case n.Kind == yaml.SequenceNode:
		l, ok := []any{}, true
		for _, item := range n.Content {
			v, vok := shape(w, item)
			l, ok = append(l, v), ok && vok
		}
		return l, ok
	}
	return "s", true
}

func shapeOf(v any) (any, bool) {
	ok := true
	switch v := v.(type) {
	case map[any]any:
		m := map[string]any{}
		for k, e := range v {
			ks, isString := k.(string) // YAML 1.1 reads Y, on, 1 as others
			m[ks], ok = shapeOf(e)
			ok = ok && isString
		}
		return m, ok
	case []any:
		l := []any{}
		for _, e := range v {
			se, eok := shapeOf(e)
			l, ok = append(l, se), ok && eok
		}
		return l, ok
	}
	return "s", true
}

// TestPairsProblems: the problems of a mapping's keys, each at its node
// and key.
func TestPairsProblems(t *testing.T) {
	for _, tt := range []struct {
		src   string
		rules yamlwalk.Rules
		want  string
	}{
		{"v: p\nv: q\n", yamlwalk.Portero, "2:1 v: given twice (first at line 1)"},
		{"v: p\nv: q\n", yamlwalk.YAMLv2, ""},
		{"[a]: p\n", yamlwalk.Portero, "1:1 : a key must be a name, found a list"},
		{"x: &x [p]\n<<: *x\n", yamlwalk.YAMLv2, `1:8 : want a mapping to merge with <<, found "p"`},
		{"x: &x p\n<<: *x\n", yamlwalk.YAMLv2, `2:5 : want a mapping (or a list of them) to merge with <<, found "p"`},
		{"<<: [p]\n", yamlwalk.Portero, `1:6 : want a mapping to merge with <<, found "p"`},
	} {
		_, problems := (&yamlwalk.Walker{}).Pairs(root(t, tt.src), tt.rules)
		var got []string
		for _, p := range problems {
			got = append(got, fmt.Sprintf("%d:%d %s: %s", p.Node.Line, p.Node.Column, p.Key, p.Msg))
		}
		if strings.Join(got, "\n") != tt.want {
			t.Errorf("%q: %q, want %q", tt.src, got, tt.want)
		}
	}
}

// TestWalkerBound: aliases that repeat each other ten times over nine
// levels (10⁹ merges) stop at the bound, with one error.
func TestWalkerBound(t *testing.T) {
	src := "m0: &m0 {v: p}\n"
	for i := 1; i <= 9; i++ {
		src += fmt.Sprintf("m%d: &m%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*m%d, ", i-1), 10), ", "))
	}
	src += "<<: *m9\n"
	w := &yamlwalk.Walker{MaxNodes: 1000}
	_, problems := w.Pairs(root(t, src), yamlwalk.Portero)
	if !w.Exceeded() || len(problems) != 1 || !strings.Contains(problems[0].Msg, "more than 1000 values once YAML aliases are expanded") {
		t.Errorf("exceeded %v, problems %+v", w.Exceeded(), problems)
	}
}

func TestSyntaxError(t *testing.T) {
	for _, tt := range []struct {
		src, want string
	}{
		{"a: [\n", "1:0 did not find expected node content"},
		{"a:\n  b: 1\n\t c: 2\n", "3:1 found a tab character that violates indentation: YAML indents with spaces only, never with tabs"},
	} {
		var n yaml.Node
		err := yaml.Unmarshal([]byte(tt.src), &n)
		if err == nil {
			t.Fatalf("%q: no error", tt.src)
		}
		line, col, msg := yamlwalk.SyntaxError([]byte(tt.src), err)
		if got := fmt.Sprintf("%d:%d %s", line, col, msg); got != tt.want {
			t.Errorf("%q: %q, want %q", tt.src, got, tt.want)
		}
	}
}
