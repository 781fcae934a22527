package envoyconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/config/fileerr"
	"github.com/portero-rl/portero/internal/config/yamlwalk"
	"github.com/portero-rl/portero/internal/plans"
)

// Error is a configuration problem at a place in a file; Field is the
// dotted path of the field, such as "descriptors[0].rate_limit.unit".
type Error = fileerr.Error

// Source is one configuration file's name and contents.
type Source struct {
	Name string
	Data []byte
}

// Options tune loading; the zero value is envoyproxy/ratelimit's default.
type Options struct {
	// MergeDomains lets several files add to one domain
	// (MERGE_DOMAIN_CONFIG=true); by default that is an error.
	MergeDomains bool
	// Envoyproxy reads files exactly as envoyproxy/ratelimit does: every
	// file of a directory, an empty one as no domains, the first document,
	// keys checked anywhere against its known keys, the last of a key
	// given twice, its types, composite duplicates, any count and name.
	Envoyproxy bool
	// IgnoreDotFiles skips dot files under Envoyproxy
	// (RUNTIME_IGNOREDOTFILES); without it they are always skipped.
	IgnoreDotFiles bool
	QuotaMode      bool // every limit in quota_mode (QUOTA_MODE)
}

// maxDepth bounds the nesting of descriptors, so that a hostile file
// cannot exhaust the stack; maxErrors the errors reported of one file.
const (
	maxDepth  = 32
	maxErrors = 20
)

// Load reads the configuration at path: one YAML file, or a directory whose
// *.yaml and *.yml files (subdirectories too, in lexical order) are loaded
// as envoyproxy/ratelimit loads its runtime directory. Errors are *Error
// values, joined.
func Load(path string, opts Options) (*descriptor.Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("envoy ratelimit config: %w", err)
	}
	var srcs []Source
	if !st.IsDir() {
		data, err := readFile(path)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, Source{Name: path, Data: data})
	} else {
		var names []string
		// Walk the directory the path resolves to: a runtime directory is
		// often a symlink that is swapped to publish a new version.
		root, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, fmt.Errorf("envoy ratelimit config: %w", err)
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != root && strings.HasPrefix(d.Name(), ".") && (!opts.Envoyproxy || opts.IgnoreDotFiles) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return nil
			}
			// envoyproxy/ratelimit (goruntime) reads every file of the
			// directory; Portero, its YAML files.
			ext := strings.ToLower(filepath.Ext(p))
			if ext != ".yaml" && ext != ".yml" && !opts.Envoyproxy {
				return nil
			}
			// Follow symlinks to files (runtime directories are symlink swaps).
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			if fi.Mode().IsRegular() {
				names = append(names, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("envoy ratelimit config: %w", err)
		}
		sort.Strings(names)
		if len(names) == 0 && !opts.Envoyproxy {
			return nil, fmt.Errorf("envoy ratelimit config: %s: no .yaml or .yml files", path)
		}
		for _, n := range names {
			data, err := readFile(n)
			if err != nil {
				return nil, err
			}
			srcs = append(srcs, Source{Name: n, Data: data})
		}
	}
	return Parse(srcs, opts)
}

func readFile(path string) ([]byte, error) {
	data, err := fileerr.Read(path)
	if errors.Is(err, fileerr.ErrTooLarge) {
		return nil, &Error{File: path, Msg: fileerr.ErrTooLarge.Error()}
	}
	if err != nil {
		return nil, fmt.Errorf("envoy ratelimit config: %w", err)
	}
	return data, nil
}

// Parse builds a configuration from file contents, each holding one domain.
func Parse(srcs []Source, opts Options) (*descriptor.Config, error) {
	domains := map[string]*descriptor.Domain{}
	var order []*descriptor.Domain
	var files []string
	var errs []error
	for _, src := range srcs {
		p := &parser{file: src.Name, compat: opts.Envoyproxy, quota: opts.QuotaMode}
		if p.compat {
			p.rules = yamlwalk.YAMLv2
		}
		dom := p.file1(src.Data)
		if len(p.errs) > 0 {
			errs = append(errs, p.errs...)
			continue
		}
		files = append(files, src.Name)
		if old, ok := domains[dom.Name]; ok {
			if !opts.MergeDomains {
				errs = append(errs, &Error{File: src.Name, Line: p.domainLine, Column: p.domainCol, Field: "domain",
					Msg: fmt.Sprintf("duplicate domain %q (also in %s); set merge-domains to combine them", dom.Name, strings.Join(old.Files, ", "))})
				continue
			}
			add := old.Add
			if opts.Envoyproxy {
				add = old.AddEnvoyproxy
			}
			for _, d := range dom.Nodes {
				if prev := add(d); prev != nil {
					errs = append(errs, &Error{File: src.Name, Line: d.Line, Field: "descriptors",
						Msg: fmt.Sprintf("duplicate descriptor %q in merged domain %q (first at %s:%d)", d.Composite(), dom.Name, prev.File, prev.Line)})
				}
			}
			old.Files = append(old.Files, src.Name)
			continue
		}
		domains[dom.Name] = dom
		order = append(order, dom)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return descriptor.NewConfig(order, files)
}

type parser struct {
	file                  string
	rules                 yamlwalk.Rules // Portero, or YAMLv2 under Envoyproxy
	walk                  yamlwalk.Walker
	lists                 plans.AddressLists // portero.address_lists
	errs                  []error
	domainLine, domainCol int
	compat                bool // Options.Envoyproxy
	quota                 bool // Options.QuotaMode
}

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		return
	}
	e := &Error{File: p.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

func (p *parser) file1(data []byte) *descriptor.Domain {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(nil, "domain", "empty file: a config file needs a domain")
			return nil
		}
		p.yamlError(data, err)
		return nil
	}
	// envoyproxy/ratelimit reads the first document and ignores the rest.
	if !p.compat {
		var extra yaml.Node
		if err := dec.Decode(&extra); err == nil {
			p.errorf(&extra, "", "more than one YAML document: one file holds one domain")
			return nil
		} else if !errors.Is(err, io.EOF) {
			p.yamlError(data, err)
			return nil
		}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if p.compat && yamlwalk.IsNull(root) {
		p.errorf(root, "domain", "config file cannot have empty domain")
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "", "the file must be a mapping with domain and descriptors")
		return nil
	}
	if p.compat {
		p.checkKeys(root, "", 0)
		if len(p.errs) > 0 {
			return nil
		}
	}
	var name string
	var descs *yaml.Node
	p.fields(root, "", func(k string, kn, v *yaml.Node) {
		switch k {
		case "domain":
			name = p.str(v, "domain")
			p.domainLine, p.domainCol = v.Line, v.Column
		case "descriptors":
			descs = v
		case "portero":
			p.fileExtension(v, "portero")
		default:
			p.unknown(kn, "", k, rootFields)
		}
	})
	if name == "" && len(p.errs) == 0 {
		p.errorf(root, "domain", "missing or empty domain")
	}
	dom := descriptor.NewDomain(name, p.file)
	if descs != nil {
		add := dom.Add
		if p.compat {
			add = dom.AddEnvoyproxy
		}
		p.descriptors(descs, add, "descriptors", name, 1)
	}
	if len(p.errs) > 0 {
		return nil
	}
	return dom
}

func (p *parser) yamlError(data []byte, err error) {
	line, col, msg := yamlwalk.SyntaxError(data, err)
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Column: col, Msg: "invalid YAML: " + msg})
}

// resolve returns n, an alias followed, counted against the file's bound
// of values; nil past it, said even after maxErrors others.
func (p *parser) resolve(n *yaml.Node, field string) *yaml.Node {
	r, err := p.walk.Resolve(n)
	if err != nil {
		p.errs = append(p.errs, &Error{File: p.file, Line: n.Line, Column: n.Column, Field: field, Msg: err.Error()})
	}
	return r
}

// fields calls f for every key of mapping n as p.rules read them,
// reporting a non-mapping and the problems of its keys.
func (p *parser) fields(n *yaml.Node, field string, f func(k string, kn, v *yaml.Node)) {
	if n = p.resolve(n, field); n == nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, field, "want a mapping, found %s", yamlwalk.Describe(n))
		return
	}
	p.pairs(n, field, p.rules, f)
}

// pairs calls f for every key of mapping n as rules read them, after
// reporting the problems of its keys.
func (p *parser) pairs(n *yaml.Node, field string, rules yamlwalk.Rules, f func(k string, kn, v *yaml.Node)) {
	pairs, problems := p.walk.Pairs(n, rules)
	for _, pr := range problems {
		p.errorf(pr.Node, join(field, pr.Key), "%s", pr.Msg)
	}
	for _, kv := range pairs {
		f(kv.Key, kv.KeyNode, kv.Value)
	}
}

// The fields of each mapping, for "did you mean".
var (
	rootFields       = []string{"domain", "descriptors", "portero"}
	descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "value_to_metric", "share_threshold", "quota_mode", "metadata", "portero"}
	rateLimitFields  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "portero"}
)

// unknown reports key k of the mapping at field, which has known.
func (p *parser) unknown(kn *yaml.Node, field, k string, known []string) {
	if p.compat {
		return // checkKeys reported the unknown keys; a known one out of place is ignored, as there
	}
	p.errorf(kn, join(field, k), "%s", fileerr.Unknown(k, known))
}

func join(field, k string) string {
	if field == "" {
		return k
	}
	return field + "." + k
}

func (p *parser) str(v *yaml.Node, field string) string {
	if p.compat && yamlwalk.IsNull(v) {
		return "" // yaml.v2 leaves the string empty
	}
	if v.Kind != yaml.ScalarNode || yamlwalk.IsNull(v) {
		p.errorf(v, field, "want a string, found %s", yamlwalk.Describe(v))
		return ""
	}
	return v.Value
}

func (p *parser) boolean(v *yaml.Node, field string) bool {
	if p.compat {
		return p.boolean11(v, field)
	}
	if v.Kind == yaml.ScalarNode {
		switch strings.ToLower(v.Value) {
		case "true", "yes", "on":
			return true
		case "false", "no", "off":
			return false
		}
	}
	p.errorf(v, field, "want true or false, found %s", yamlwalk.Describe(v))
	return false
}

// uint reads a whole number from 0 to max: decimal digits as Portero's own
// file takes them (fileerr.Whole), or, with Options.Envoyproxy, as
// yaml.v2 reads them (uint11).
func (p *parser) uint(v *yaml.Node, field string, max uint64) uint64 {
	if p.compat {
		return p.uint11(v, field, max)
	}
	if v.Kind == yaml.ScalarNode && !yamlwalk.IsNull(v) {
		if n, ok := fileerr.Whole(v.Value); ok && n >= 0 && uint64(n) <= max {
			return uint64(n)
		}
	}
	p.errorf(v, field, "want a whole number from 0 to %d, found %s", max, yamlwalk.Describe(v))
	return 0
}

// descriptors reads the list n of one level, adding each node with add
// (the domain's or the parent node's Add, which refuses duplicates).
func (p *parser) descriptors(n *yaml.Node, add func(*descriptor.Node) *descriptor.Node, field, parentKey string, depth int) {
	if yamlwalk.IsNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, field, "want a list of descriptors, found %s", yamlwalk.Describe(n))
		return
	}
	if depth > maxDepth {
		p.errorf(n, field, "descriptors nested deeper than %d levels", maxDepth)
		return
	}
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		if item = p.resolve(item, f); item == nil {
			return
		}
		d := p.descriptor(item, f, parentKey, depth)
		if d == nil {
			continue
		}
		if prev := add(d); prev != nil {
			p.errorf(item, f, "duplicate descriptor %q at this level (first at line %d)", d.Composite(), prev.Line)
		}
	}
}

func (p *parser) descriptor(n *yaml.Node, field, parentKey string, depth int) *descriptor.Node {
	d := &descriptor.Node{File: p.file, Line: n.Line}
	var rl, children, addrs *yaml.Node
	var rlField string
	before := len(p.errs)
	p.fields(n, field, func(k string, kn, v *yaml.Node) {
		f := join(field, k)
		switch k {
		case "key":
			d.Key = p.str(v, f)
			if d.Key == "" && len(p.errs) == before {
				p.errorf(v, f, "empty key")
			}
		case "value":
			d.Value = p.str(v, f)
		case "rate_limit":
			rl, rlField = v, f
		case "descriptors":
			children = v
		case "shadow_mode":
			d.ShadowMode = p.boolean(v, f)
		case "detailed_metric":
			d.DetailedMetric = p.boolean(v, f)
		case "value_to_metric":
			d.ValueToMetric = p.boolean(v, f)
		case "share_threshold":
			d.ShareThreshold = p.boolean(v, f)
		case "quota_mode":
			d.QuotaMode = p.boolean(v, f)
		case "metadata":
			d.Metadata = p.metadata(v, f)
		case "portero":
			addrs = v
		default:
			p.unknown(kn, field, k, descriptorFields)
		}
	})
	if addrs != nil && len(p.errs) == before {
		p.addresses(d, addrs, join(field, "portero"))
	}
	if n.Kind == yaml.MappingNode && d.Key == "" && len(p.errs) == before {
		p.errorf(n, join(field, "key"), "missing key")
	}
	if len(p.errs) > before {
		return nil
	}
	if d.ShareThreshold && !strings.Contains(d.Value, "*") && d.AddressText == "" {
		p.errorf(n, join(field, "share_threshold"), "only valid with a wildcard value (containing '*') or addresses (portero.addresses)")
	}
	fullKey := parentKey + "." + d.Composite()
	if rl != nil {
		if d.Limit = p.rateLimit(rl, rlField, fullKey, d.ShadowMode, d.QuotaMode || p.quota); d.Limit != nil {
			d.Limit.DetailedMetric = d.DetailedMetric
			d.Limit.Metadata = d.Metadata
		}
	}
	if children != nil {
		add := d.Add
		if p.compat {
			add = d.AddEnvoyproxy
		}
		p.descriptors(children, add, join(field, "descriptors"), fullKey, depth+1)
	}
	if len(p.errs) > before {
		return nil
	}
	return d
}

func (p *parser) rateLimit(n *yaml.Node, field, fullKey string, shadow, quota bool) *descriptor.Limit {
	if yamlwalk.IsNull(n) {
		return nil
	}
	r := &descriptor.LimitSpec{FullKey: fullKey, Shadow: shadow, QuotaMode: quota, Envoyproxy: p.compat}
	before := len(p.errs)
	var unitNode, rpuNode *yaml.Node
	var ext *yaml.Node
	p.fields(n, field, func(k string, kn, v *yaml.Node) {
		f := join(field, k)
		switch k {
		case "unit":
			unitNode = v
		case "requests_per_unit":
			rpuNode = v
			r.RequestsPerUnit = uint32(p.uint(v, f, math.MaxUint32))
		case "unlimited":
			r.Unlimited = p.boolean(v, f)
		case "name":
			r.Name = p.str(v, f)
		case "replaces":
			r.Replaces = p.replaces(v, f)
		case "portero":
			ext = v
		default:
			p.unknown(kn, field, k, rateLimitFields)
		}
	})
	if unitNode != nil && len(p.errs) == before {
		s := p.str(unitNode, join(field, "unit"))
		u, err := descriptor.ParseUnit(s)
		switch {
		case len(p.errs) > before:
		case err != nil && p.compat && r.Unlimited:
			// envoyproxy/ratelimit ignores a unit it cannot read beside
			// unlimited (and refuses one it can).
			unitNode = nil
		case err != nil:
			p.errorf(unitNode, join(field, "unit"), "%v", err)
		default:
			r.Unit = u
		}
	}
	if len(p.errs) > before {
		return nil
	}
	var x extension
	if ext != nil {
		x = p.extension(ext, join(field, "portero"))
	}
	switch {
	case r.Unlimited && unitNode != nil:
		p.errorf(unitNode, join(field, "unit"), "should not be given when unlimited is true")
	case r.Unlimited && ext != nil:
		p.errorf(ext, join(field, "portero"), "should not be given when unlimited is true")
	case !r.Unlimited && x.lookBack != nil && x.calendar == nil:
		p.lookBack(r, &x, unitNode, rpuNode, n, field)
	case !r.Unlimited && unitNode == nil:
		p.errorf(n, join(field, "unit"), "missing unit: want second, minute, hour, day, week, month or year")
	case !r.Unlimited && rpuNode == nil:
		// envoyproxy/ratelimit reads a missing requests_per_unit as 0:
		// every request is over the limit. Keep that, it is documented.
	}
	for _, name := range r.Replaces {
		if name == r.Name && name != "" {
			p.errorf(n, join(field, "replaces"), "a limit cannot replace itself (%q)", name)
		}
	}
	if x.alg == "" {
		x.alg = portero.FixedWindow
		if x.lookBack != nil {
			x.alg = portero.SlidingLog // exact, as the gateway's rate_rules
		}
	}
	if x.calendar != nil && len(p.errs) == before {
		p.calendar(r, &x, unitNode, rpuNode, n, field)
	}
	if x.burst > 0 && isWindow(x.alg) {
		p.errorf(x.burstNode, join(field, "portero.burst"), "burst applies to token-bucket, leaky-meter, gcra and leaky-queue, not to %s", x.alg)
	}
	p.budget(r, &x, field)
	if len(p.errs) > before {
		return nil
	}
	r.Algorithm, r.Burst = x.alg, x.burst
	l, err := descriptor.NewLimit(*r)
	if err != nil {
		p.errorf(n, field, "%v", err)
		return nil
	}
	return l
}

func (p *parser) replaces(n *yaml.Node, field string) []string {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, field, "want a list of {name: ...}, found %s", yamlwalk.Describe(n))
		return nil
	}
	var out []string
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		name := ""
		p.fields(item, f, func(k string, kn, v *yaml.Node) {
			if k != "name" {
				p.unknown(kn, f, k, []string{"name"})
				return
			}
			name = p.str(v, join(f, "name"))
		})
		if name == "" {
			p.errorf(item, join(f, "name"), "empty name")
			continue
		}
		out = append(out, name)
	}
	return out
}

func isWindow(a portero.Algorithm) bool {
	switch a {
	case portero.FixedWindow, portero.FixedWindowAnchored, portero.SlidingLog, portero.SlidingCounter:
		return true
	}
	return false
}
