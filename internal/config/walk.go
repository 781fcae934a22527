package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/agnivade/levenshtein"
	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero/internal/config/fileerr"
)

// The YAML tree is walked here, field by field, instead of being handed to
// the decoder's strict mode: the decoder stops at the first unknown field
// (hiding every other problem), and its type errors name neither the field
// nor the column. The walker reports every problem with the node's line,
// column and field path, sets what it can, and goes on.

// maxNodes bounds the nodes one file may expand to through YAML aliases
// (each alias is walked as a copy of its anchor, so a few lines can stand
// for billions of nodes).
const maxNodes = 1_000_000

type walker struct {
	p      *parser
	nodes  int
	bombed bool
}

// walk decodes the document root into f, reporting problems to p.
func (p *parser) walk(root *yaml.Node, f *File) {
	n := root
	if n.Kind == 0 {
		return // an empty file: validation says what is missing
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return
		}
		n = n.Content[0]
	}
	w := &walker{p: p}
	w.value(n, reflect.ValueOf(f).Elem(), nil)
}

// typeErr reports that n cannot be the value at path.
func (w *walker) typeErr(n *yaml.Node, path []any, want string) {
	w.p.nodeErr(n, path, true, "want %s, found %s", want, describe(n))
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

func (w *walker) value(n *yaml.Node, v reflect.Value, path []any) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if !w.count(n, path) {
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // "server:" with nothing under it: the defaults
	}
	switch v.Kind() {
	case reflect.Pointer: // an optional section: present when given
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		w.value(n, v.Elem(), path)
	case reflect.Struct:
		w.structure(n, v, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			w.typeErr(n, path, "a mapping of names")
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		w.pairs(n, path, func(k string, kn, vn *yaml.Node) {
			e := reflect.New(v.Type().Elem()).Elem()
			w.value(vn, e, append(path[:len(path):len(path)], k))
			v.SetMapIndex(reflect.ValueOf(k), e)
		})
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.typeErr(n, path, "a list")
			return
		}
		for i, item := range n.Content {
			e := reflect.New(v.Type().Elem()).Elem()
			w.value(item, e, append(path[:len(path):len(path)], i))
			v.Set(reflect.Append(v, e))
		}
	default:
		w.scalar(n, v, path)
	}
}

// count counts one more node walked, and reports false (once, with an
// error) past maxNodes.
func (w *walker) count(n *yaml.Node, path []any) bool {
	if w.nodes++; w.nodes <= maxNodes {
		return true
	}
	if !w.bombed {
		w.bombed = true
		w.p.nodeErr(n, path, true, "more than %d values once YAML aliases are expanded: is an alias repeated too often?", maxNodes)
		w.p.walked[""] = true // what validation would add is the walk cut short
	}
	return false
}

// wants names what a scalar field of each kind takes, for type errors.
var wants = map[reflect.Kind]string{
	reflect.String: "text", reflect.Int: "a whole number", reflect.Int64: "a whole number", reflect.Float64: "a number", reflect.Bool: "true or false",
}

func (w *walker) scalar(n *yaml.Node, v reflect.Value, path []any) {
	want := wants[v.Kind()]
	if n.Kind != yaml.ScalarNode {
		w.typeErr(n, path, want)
		return
	}
	if v.CanInt() {
		w.whole(n, v, path)
		return
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		w.typeErr(n, path, want)
	} else if v.CanFloat() && v.Float() == 0 {
		w.zero(path)
	}
}

// whole reads every whole-number field, at the start and on every reload:
// a plain YAML integer in decimal digits (fileerr.Whole) that fits the
// field. The decoder would truncate 2.5 to 2 and read 1e2, 0x10 or 010.
func (w *walker) whole(n *yaml.Node, v reflect.Value, path []any) {
	i, ok := fileerr.Whole(n.Value)
	switch {
	case ok && n.Tag == "!!int" && !v.OverflowInt(i):
	case n.Tag == "!!int" || n.Tag == "!!float":
		w.typeErr(n, path, "a whole number in decimal digits")
		return
	default:
		w.typeErr(n, path, "a whole number")
		return
	}
	v.SetInt(i)
	if i == 0 {
		w.zero(path)
	}
}

// zero notes that the number at path was written as 0 (parser.zero).
func (w *walker) zero(path []any) {
	if w.p.zeros == nil {
		w.p.zeros = map[string]bool{}
	}
	w.p.zeros[fieldName(path)] = true
}

// pairs calls f for every key of mapping n, in order, after the keys merged
// in with "<<" (which the mapping's own keys override); it reports keys
// that are not scalars and keys given twice.
func (w *walker) pairs(n *yaml.Node, path []any, f func(k string, kn, vn *yaml.Node)) {
	if w.bombed {
		return
	}
	seen := map[string]*yaml.Node{}
	var own [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if kn.Kind == yaml.ScalarNode && kn.Tag == "!!merge" {
			w.merge(vn, path, f)
			continue
		}
		own = append(own, [2]*yaml.Node{kn, vn})
	}
	for _, kv := range own {
		kn, vn := kv[0], kv[1]
		if kn.Kind != yaml.ScalarNode {
			w.p.nodeErr(kn, path, true, "a key must be a name, found %s", describe(kn))
			continue
		}
		if first, dup := seen[kn.Value]; dup {
			w.p.nodeErr(kn, append(path[:len(path):len(path)], kn.Value), true, "given twice (first at line %d)", first.Line)
			continue
		}
		seen[kn.Value] = kn
		f(kn.Value, kn, vn)
	}
}

// merge applies the mapping (or list of mappings) of a "<<" key.
func (w *walker) merge(vn *yaml.Node, path []any, f func(k string, kn, vn *yaml.Node)) {
	if vn.Kind == yaml.AliasNode && vn.Alias != nil {
		vn = vn.Alias
	}
	if !w.count(vn, path) {
		return
	}
	switch vn.Kind {
	case yaml.MappingNode:
		w.pairs(vn, path, f)
	case yaml.SequenceNode:
		for _, m := range vn.Content {
			w.merge(m, path, f)
		}
	default:
		w.typeErr(vn, path, "a mapping to merge with <<")
	}
}

func (w *walker) structure(n *yaml.Node, v reflect.Value, path []any) {
	fields := fieldsOf(v.Type())
	if n.Kind != yaml.MappingNode {
		what := "a mapping of fields (" + strings.Join(fields.names, ", ") + ")"
		if len(path) == 0 {
			what = "a mapping of sections (" + strings.Join(fields.names, ", ") + ")"
		}
		w.typeErr(n, path, what)
		return
	}
	w.pairs(n, path, func(k string, kn, vn *yaml.Node) {
		i, ok := fields.index[k]
		if !ok {
			msg := "unknown field"
			if s := suggest(k, fields.names); s != "" {
				msg += "; did you mean " + s + "?"
				// What validation would say of the missing s is this typo.
				w.p.walked[fieldName(append(path[:len(path):len(path)], s))] = true
			} else {
				msg += " (known here: " + strings.Join(fields.names, ", ") + ")"
			}
			w.p.nodeErr(kn, append(path[:len(path):len(path)], k), true, "%s", msg)
			return
		}
		w.value(vn, v.Field(i), append(path[:len(path):len(path)], k))
	})
}

// structFields are the YAML names of a struct's fields, in order.
type structFields struct {
	names []string
	index map[string]int
}

var fieldCache sync.Map // reflect.Type → *structFields

func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	f := &structFields{index: map[string]int{}}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		f.names = append(f.names, name)
		f.index[name] = i
	}
	fieldCache.Store(t, f)
	return f
}

// suggest returns the known name closest to k by edit distance
// (github.com/agnivade/levenshtein: a small, maintained implementation, so
// that the config reader does not carry its own), when it is close enough
// to be a misspelling: at most a third of the longer name, and at least
// two edits allowed (a swap of two letters, "kye" for key, is two). Ties go
// to the first in field order.
func suggest(k string, names []string) string {
	best, bestD := "", 0
	for _, n := range names {
		d := levenshtein.ComputeDistance(k, n)
		if limit := max(2, max(len(k), len(n))/3); d <= limit && (best == "" || d < bestD) {
			best, bestD = n, d
		}
	}
	return best
}

// sortErrors puts errors in file order and drops exact repeats (one
// problem reached by two paths, such as through an alias).
func sortErrors(es Errors) Errors {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Line != es[j].Line {
			return es[i].Line < es[j].Line
		}
		return es[i].Column < es[j].Column
	})
	out := es[:0]
	seen := map[string]bool{}
	for _, e := range es {
		if s := e.Error(); !seen[s] {
			seen[s] = true
			out = append(out, e)
		}
	}
	return out
}
