// Package yamlwalk reads the mappings of a YAML node tree for both
// configuration readers (internal/config and internal/config/envoyconf):
// aliases followed within a bound, merge keys (<<) and keys given twice by
// one rule per mode (Rules), syntax errors placed at their line and column.
// The readers walk the tree rather than decode it strictly, so that one
// problem does not hide the others and each error names its field.
package yamlwalk

import (
	"bytes"
	"cmp"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Rules say how the keys of a mapping are read.
type Rules uint8

const (
	// Portero reads a mapping's own keys, each once, then those a <<
	// merges in that it lacks (of a list of mappings, the first's wins).
	Portero Rules = iota
	// YAMLv2 reads keys as yaml.v2 decodes a struct, as
	// envoyproxy/ratelimit does: in order, a << where it stands; a key
	// given again replaces a scalar or a list, and adds to a mapping.
	YAMLv2
	// YAMLv2Map is YAMLv2 into a map of interface values (the key check,
	// metadata): a mapping given again replaces the earlier one.
	YAMLv2Map
)

// DefaultMaxNodes is the bound of a Walker whose MaxNodes is 0.
const DefaultMaxNodes = 1_000_000

// Walker counts the nodes one file's walk visits, aliases expanded (a few
// lines of aliases can stand for billions of nodes).
type Walker struct {
	MaxNodes int // 0 means DefaultMaxNodes
	nodes    int
	over     bool
}

// Resolve returns n, or the node alias n stands for, counted; past
// MaxNodes nil, and the first time an error to report at n.
func (w *Walker) Resolve(n *yaml.Node) (*yaml.Node, error) {
	if w.nodes++; w.nodes <= cmp.Or(w.MaxNodes, DefaultMaxNodes) {
		return deref(n), nil
	}
	if w.over {
		return nil, nil
	}
	w.over = true
	return nil, fmt.Errorf("more than %d values once YAML aliases are expanded: is an alias repeated too often?", cmp.Or(w.MaxNodes, DefaultMaxNodes))
}

// Exceeded reports whether the walk went past MaxNodes.
func (w *Walker) Exceeded() bool { return w.over }

func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// Pair is one key of a mapping and its value, an alias followed.
type Pair struct {
	Key            string
	KeyNode, Value *yaml.Node
}

// Problem is something wrong with a mapping's keys, at Node, about Key
// (empty for the mapping itself).
type Problem struct {
	Node *yaml.Node
	Key  string
	Msg  string
}

// Pairs returns the keys of mapping n and their values as rules read them,
// in order of first appearance, and the problems of its keys.
func (w *Walker) Pairs(n *yaml.Node, rules Rules) ([]Pair, []Problem) {
	m := &mapping{w: w, rules: rules, index: map[string]int{}}
	if rules == Portero {
		m.portero(n)
	} else {
		m.yamlV2(n)
	}
	return m.pairs, m.problems
}

// mapping collects the pairs of one mapping.
type mapping struct {
	w        *Walker
	rules    Rules
	pairs    []Pair
	index    map[string]int // the position of each key in pairs
	problems []Problem
}

func (m *mapping) problem(n *yaml.Node, key, format string, args ...any) {
	m.problems = append(m.problems, Problem{Node: n, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// key reports a key that is not a scalar; ok is false then.
func (m *mapping) key(kn *yaml.Node) bool {
	if kn.Kind != yaml.ScalarNode {
		m.problem(kn, "", "a key must be a name, found %s", Describe(kn))
		return false
	}
	return true
}

func isMerge(kn *yaml.Node) bool { return kn.Kind == yaml.ScalarNode && kn.Tag == "!!merge" }

// portero reads n's own keys, then those its merges add.
func (m *mapping) portero(n *yaml.Node) {
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if isMerge(kn) {
			merges = append(merges, vn)
			continue
		}
		if !m.key(kn) {
			continue
		}
		if j, dup := m.index[kn.Value]; dup {
			m.problem(kn, kn.Value, "given twice (first at line %d)", m.pairs[j].KeyNode.Line)
			continue
		}
		m.index[kn.Value] = len(m.pairs)
		m.pairs = append(m.pairs, Pair{kn.Value, kn, deref(vn)})
	}
	for _, vn := range merges {
		m.merged(vn, false, func(p Pair) {
			if _, own := m.index[p.Key]; !own {
				m.index[p.Key] = len(m.pairs)
				m.pairs = append(m.pairs, p)
			}
		})
	}
}

// yamlV2 reads n's keys in order, each merge where it stands.
func (m *mapping) yamlV2(n *yaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if isMerge(kn) {
			m.merged(vn, true, m.set)
		} else if m.key(kn) {
			m.set(Pair{kn.Value, kn, deref(vn)})
		}
	}
}

// set gives p.Key its value under the YAMLv2 rules.
func (m *mapping) set(p Pair) {
	j, again := m.index[p.Key]
	if !again {
		m.index[p.Key] = len(m.pairs)
		m.pairs = append(m.pairs, p)
		return
	}
	old := m.pairs[j].Value
	if m.rules == YAMLv2 && old.Kind == yaml.MappingNode && p.Value.Kind == yaml.MappingNode {
		both := *old
		both.Content = append(append([]*yaml.Node{}, old.Content...), p.Value.Content...)
		p.Value = &both
	}
	m.pairs[j] = p
}

// merged calls add for each pair a << merges in: a mapping's, or a list of
// mappings' in order (with lastFirst, from the last).
func (m *mapping) merged(at *yaml.Node, lastFirst bool, add func(Pair)) {
	vn, err := m.w.Resolve(at)
	if err != nil {
		m.problem(at, "", "%v", err)
	}
	switch {
	case vn == nil:
	case vn.Kind == yaml.MappingNode:
		pairs, problems := m.w.Pairs(vn, m.rules)
		m.problems = append(m.problems, problems...)
		for _, p := range pairs {
			add(p)
		}
	case vn.Kind == yaml.SequenceNode:
		for i := range vn.Content {
			if lastFirst {
				i = len(vn.Content) - 1 - i
			}
			if item := deref(vn.Content[i]); item.Kind != yaml.MappingNode {
				m.problem(vn.Content[i], "", "want a mapping to merge with <<, found %s", Describe(item))
			} else {
				m.merged(vn.Content[i], lastFirst, add)
			}
		}
	default:
		m.problem(at, "", "want a mapping (or a list of them) to merge with <<, found %s", Describe(vn))
	}
}

// Describe names what n is, for "want ..., found ..." messages.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "something else"
}

// IsNull reports whether n is YAML's null (nothing, ~ or null).
func IsNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// SyntaxError places an error of the YAML library in data: its line (0 for
// none) and message; a tab in the indentation is put at the tab (the
// library reports where the block before it starts), with a hint.
func SyntaxError(data []byte, err error) (line, column int, msg string) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	if sm := yamlLine.FindStringSubmatch(err.Error()); sm != nil {
		line, _ = strconv.Atoi(sm[1])
		msg = sm[2]
	}
	if l, c, ok := tabAt(data, line, msg); ok {
		return l, c, msg + ": YAML indents with spaces only, never with tabs"
	}
	return line, 0, msg
}

// The YAML library's messages about a tab in the indentation.
var tabMessages = []string{
	"found a tab character that violates indentation",
	"found a tab character where an indentation space is expected",
	"found character that cannot start any token",
}

// tabAt finds the tab a syntax error msg at line is about: the first among
// a line's leading spaces and "-", from line on (or on line itself, for a
// character that cannot start a token).
func tabAt(data []byte, line int, msg string) (tabLine, column int, ok bool) {
	last := -1 // the last line to look at; 0 for the end of the file
	for i, m := range tabMessages {
		if strings.Contains(msg, m) {
			last = 0
			if i == len(tabMessages)-1 {
				last = line
			}
		}
	}
	if last < 0 || line < 1 {
		return 0, 0, false
	}
	for i, l := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		if n < line {
			continue
		}
		if last > 0 && n > last {
			break
		}
		lead := l[:len(l)-len(bytes.TrimLeft(l, " \t-"))]
		if col := bytes.IndexByte(lead, '\t'); col >= 0 {
			return n, col + 1, true
		}
	}
	return 0, 0, false
}
