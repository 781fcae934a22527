package config

import (
	"reflect"
	"sort"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero/internal/config/fileerr"
	"github.com/portero-rl/portero/internal/config/yamlwalk"
)

// The YAML tree is decoded here field by field, on yamlwalk's Portero
// rules, not by the decoder's strict mode, which stops at the first unknown
// field and names neither field nor column in its type errors.

type walker struct {
	p *parser
	yamlwalk.Walker
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
	w.p.nodeErr(n, path, true, "want %s, found %s", want, yamlwalk.Describe(n))
}

func (w *walker) value(n *yaml.Node, v reflect.Value, path []any) {
	at := n
	n, err := w.Resolve(n)
	if err != nil {
		w.p.nodeErr(at, path, true, "%v", err)
		w.p.walked[""] = true // what validation would add is the walk cut short
	}
	if n == nil || yamlwalk.IsNull(n) {
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

// whole reads a whole-number field: a plain YAML integer in decimal digits
// (fileerr.Whole) that fits it.
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

// pairs calls f for every key of mapping n, after reporting its problems.
func (w *walker) pairs(n *yaml.Node, path []any, f func(k string, kn, vn *yaml.Node)) {
	pairs, problems := w.Pairs(n, yamlwalk.Portero)
	for _, pr := range problems {
		at := path
		if pr.Key != "" {
			at = append(path[:len(path):len(path)], pr.Key)
		}
		w.p.nodeErr(pr.Node, at, true, "%s", pr.Msg)
	}
	if w.Exceeded() {
		w.p.walked[""] = true
		return
	}
	for _, kv := range pairs {
		f(kv.Key, kv.KeyNode, kv.Value)
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
			if s := fileerr.Suggest(k, fields.names); s != "" {
				// What validation would say of the missing s is this typo.
				w.p.walked[fieldName(append(path[:len(path):len(path)], s))] = true
			}
			w.p.nodeErr(kn, append(path[:len(path):len(path)], k), true, "%s", fileerr.Unknown(k, fields.names))
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

// sortErrors puts errors in file order and drops exact repeats (one
// problem reached through an alias too).
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
