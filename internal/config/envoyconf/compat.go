package envoyconf

import (
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero/internal/config/yamlwalk"
)

// What Options.Envoyproxy reads as envoyproxy/ratelimit does: its parser is
// yaml.v2 (YAML 1.1 scalars) behind a check of every key of the file
// against one set of known keys, wherever the key is.

// envoyproxyKeys are the keys envoyproxy/ratelimit knows (its validKeys),
// and Portero's rate_limit.portero, whose contents the parser checks.
var envoyproxyKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true, "unit": true,
	"requests_per_unit": true, "unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true, "metadata": true,
	"portero": true,
}

// bool11 maps YAML 1.1's boolean words to their value.
var bool11 = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"true": true, "True": true, "TRUE": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
	"false": false, "False": false, "FALSE": false,
}

func quoted(v *yaml.Node) bool { return v.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 }

// checkKeys reports, as envoyproxy/ratelimit's validateYamlKeys does on
// the file decoded into a map (yamlwalk.YAMLv2Map), a key that is not a
// string or not one it knows, a list of something other than mappings, and
// a value that is neither a string, a whole number, a boolean nor nothing
// (a float, say); metadata and Portero's extension are not looked into.
func (p *parser) checkKeys(n *yaml.Node, field string, depth int) {
	if depth > 4*maxDepth {
		p.errorf(n, field, "nested deeper than %d levels", 4*maxDepth)
		return
	}
	p.pairs(n, field, yamlwalk.YAMLv2Map, func(k string, kn, v *yaml.Node) {
		if kn.Tag != "!!str" {
			p.errorf(kn, field, "config error, key is not of type string: %s", k)
			return
		}
		f := join(field, k)
		if !envoyproxyKeys[k] {
			p.errorf(kn, f, "config error, unknown key %q", k)
			return
		}
		if k == "metadata" || k == "portero" {
			return
		}
		if v = p.resolve(v, f); v == nil {
			return
		}
		switch v.Kind {
		case yaml.SequenceNode:
			for j, e := range v.Content {
				if e = p.resolve(e, f); e == nil {
					return
				}
				if e.Kind != yaml.MappingNode {
					p.errorf(e, f, "config error, yaml file contains list of type other than map: %s", e.Value)
					continue
				}
				p.checkKeys(e, f+"["+strconv.Itoa(j)+"]", depth+1)
			}
		case yaml.MappingNode:
			p.checkKeys(v, f, depth+1)
		case yaml.ScalarNode:
			switch v.Tag {
			case "!!str", "!!int", "!!bool", "!!null":
			default:
				p.errorf(v, f, "error checking config: %s is not a string, a whole number or a boolean", v.Value)
			}
		}
	})
}

// boolean11 reads a boolean as yaml.v2 decodes one into a bool: a plain
// YAML 1.1 boolean word, or nothing (false); a quoted one is an error.
func (p *parser) boolean11(v *yaml.Node, field string) bool {
	if v.Kind == yaml.ScalarNode {
		if yamlwalk.IsNull(v) {
			return false
		}
		if b, ok := bool11[v.Value]; ok && !quoted(v) {
			return b
		}
	}
	p.errorf(v, field, "cannot unmarshal %s into bool", yamlwalk.Describe(v))
	return false
}

// uint11 reads a whole number as yaml.v2 decodes one into a uint32: a
// plain number (decimal, 0x hexadecimal, 0o or leading-0 octal, 0b binary,
// '_' between digits) in range, or nothing (0); a quoted one is an error.
func (p *parser) uint11(v *yaml.Node, field string, max uint64) uint64 {
	if v.Kind == yaml.ScalarNode {
		if yamlwalk.IsNull(v) {
			return 0
		}
		if !quoted(v) {
			s := strings.ReplaceAll(v.Value, "_", "")
			if strings.HasPrefix(s, "0o") {
				s = "0" + s[2:]
			}
			if n, err := strconv.ParseUint(strings.TrimPrefix(s, "+"), 0, 64); err == nil && n <= max {
				return n
			}
		}
	}
	p.errorf(v, field, "cannot unmarshal %s into a whole number from 0 to %d", yamlwalk.Describe(v), max)
	return 0
}

// metadata reads a descriptor's metadata: a mapping, kept with JSON's kinds
// of values as envoyproxy/ratelimit turns it into a protobuf Struct (keys
// as text, numbers as float64, YAML 1.1 booleans and nulls).
func (p *parser) metadata(v *yaml.Node, field string) map[string]any {
	if yamlwalk.IsNull(v) {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		p.errorf(v, field, "want a mapping, found %s", yamlwalk.Describe(v))
		return nil
	}
	m, _ := p.jsonValue(v, field, 0).(map[string]any)
	if len(m) == 0 {
		return nil
	}
	return m
}

func (p *parser) jsonValue(v *yaml.Node, field string, depth int) any {
	if v = p.resolve(v, field); v == nil {
		return nil
	}
	if depth > 4*maxDepth {
		p.errorf(v, field, "nested deeper than %d levels", 4*maxDepth)
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		// Under Envoyproxy yaml.v2 decodes metadata into a map of
		// interface values: a key given twice is its last value.
		rules := yamlwalk.Portero
		if p.compat {
			rules = yamlwalk.YAMLv2Map
		}
		m := make(map[string]any, len(v.Content)/2)
		p.pairs(v, field, rules, func(k string, _, e *yaml.Node) {
			m[k] = p.jsonValue(e, join(field, k), depth+1)
		})
		return m
	case yaml.SequenceNode:
		l := make([]any, 0, len(v.Content))
		for i, e := range v.Content {
			l = append(l, p.jsonValue(e, field+"["+strconv.Itoa(i)+"]", depth+1))
		}
		return l
	case yaml.ScalarNode:
		if quoted(v) {
			return v.Value
		}
		if b, ok := bool11[v.Value]; ok {
			return b
		}
		switch v.Tag {
		case "!!null":
			return nil
		case "!!int", "!!float":
			if f, err := strconv.ParseFloat(strings.ReplaceAll(v.Value, "_", ""), 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f
			}
			if n, err := strconv.ParseInt(v.Value, 0, 64); err == nil {
				return float64(n)
			}
			p.errorf(v, field, "%s is not a number a protobuf Struct can hold", v.Value)
			return nil
		}
		return v.Value
	}
	p.errorf(v, field, "want a value, found %s", yamlwalk.Describe(v))
	return nil
}
