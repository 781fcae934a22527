// Package descriptor is the compiler of envoyproxy/ratelimit's model: it
// matches request descriptors (ordered key/value entries, as Envoy sends
// them) against a configuration's domains the way envoyproxy/ratelimit does
// and turns them into the engine's hits. It is the peer of package policy,
// which compiles Portero's own rules and an HTTP request into hits: neither
// decides, package engine does.
//
//	Envoy RLS request ─┐                      ┌─ policy ◄── HTTP request
//	/v1/check, /v1/auth ┴─► descriptor.Compile ┤            (httplimit)
//	                        (hits)             └─► engine.Decide ─► verdict
//
// The configuration (domains, their descriptor trees and rate limits) is
// read from envoyproxy/ratelimit's YAML by internal/config/envoyconf, which
// builds it with NewDomain, Node.Add and NewLimit.
//
// # Matching
//
// A request descriptor is an ordered list of (key, value) entries. Entry i
// is looked up at level i of the domain's tree: first the node with that key
// and exactly that value, then the nodes with that key and a wildcard value
// or address lists (Node.Addresses, Portero's extension) in file order,
// then the node with that key and no value. A limit applies
// only when it sits at the level of the descriptor's last entry: a
// two-entry descriptor never matches a one-level rule, and a one-entry
// descriptor never matches a rule nested deeper.
//
// # Compiling
//
// Each descriptor that matches a limit becomes one hit: the limit's rule,
// the descriptor's store key (StoreKey), its cost (its own hits_addend, or
// the request's, 0 meaning 1) and, for a descriptor hits_addend of 0,
// check-only. A descriptor that carries a limit override uses it instead of
// the configuration. Unlimited limits and limits that another matched limit
// replaces (rate_limit.replaces) become no hit. See Compiler.Compile.
package descriptor

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/portero-rl/portero/clientip"
)

// Unit is the time unit of a rate limit, numbered as in Envoy's
// RateLimitResponse.RateLimit.Unit enum (so WEEK is 7).
type Unit int32

// The units. Month and year are fixed lengths (30 and 365 days), aligned to
// the Unix epoch, as in envoyproxy/ratelimit: not calendar months.
const (
	UnitUnknown Unit = 0
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

var unitNames = map[Unit]string{
	Second: "second", Minute: "minute", Hour: "hour", Day: "day",
	Week: "week", Month: "month", Year: "year",
}

// ParseUnit reads a unit name in any case ("second", "MINUTE", ...).
func ParseUnit(s string) (Unit, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	for u, n := range unitNames {
		if n == l {
			return u, nil
		}
	}
	return UnitUnknown, fmt.Errorf("invalid unit %q: want second, minute, hour, day, week, month or year", s)
}

// String returns the unit's lower-case name, or "unknown".
func (u Unit) String() string {
	if n, ok := unitNames[u]; ok {
		return n
	}
	return "unknown"
}

// Duration returns the unit's length: 1s, 1m, 1h, 24h, 7 days, 30 days or
// 365 days; 0 for an unknown unit.
func (u Unit) Duration() time.Duration {
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// Valid reports whether u is one of the known units.
func (u Unit) Valid() bool { return u.Duration() > 0 }

// Entry is one (key, value) pair of a request descriptor.
type Entry struct {
	Key, Value string
}

// Node is one node of a domain's tree: a descriptor of the configuration.
type Node struct {
	Key, Value string
	// Limit is nil when the node has no limit (only children, or a
	// whitelisted key).
	Limit *Limit
	// ShadowMode counts requests but never refuses them.
	ShadowMode bool
	// QuotaMode (envoyproxy/ratelimit's quota_mode) refuses only when every
	// quota descriptor of the request is over its limit.
	QuotaMode bool
	// Metadata is the node's metadata, with JSON's kinds of values
	// (string, float64, bool, nil, []any, map[string]any): the Envoy door
	// returns it in dynamic_metadata for descriptors that pass. Nil when
	// none.
	Metadata map[string]any
	// DetailedMetric names the metrics of the node's limit by the
	// request's values (Limit.DetailedMetric); ValueToMetric is accepted
	// for compatibility and changes nothing.
	DetailedMetric, ValueToMetric bool
	// ShareThreshold makes every value that matches a wildcard (or an
	// address node's addresses) share one counter, instead of one counter
	// per value.
	ShareThreshold bool
	// Addresses and NotAddresses, Portero's extension (a descriptor's
	// portero: {addresses, not_addresses}), make the node match, in place
	// of a Value, the entries with its Key whose value is an IP address
	// (as clientip.ParseHop reads it: an IPv4-mapped address as IPv4) in
	// Addresses, when given, and not in NotAddresses, when given; a value
	// that is no address matches neither. Such a node is tried with the
	// wildcards, in file order. AddressText names it (Composite) as the
	// file wrote the lists: "[monitoring]", "![10.0.0.0/8]",
	// "[10.0.0.0/8]![10.1.0.0/16]". Nil, nil and empty on other nodes.
	Addresses, NotAddresses *clientip.AddrSet
	AddressText             string
	// Children are the next level, in the order they were added.
	Children []*Node
	// File and Line locate the node in its file.
	File string
	Line int

	level level
	parts []string // the value split at its '*'s
	// composite is Composite(), and cparts it split at its '*'s, built
	// when the node is added (envoyproxy/ratelimit's matching).
	composite string
	cparts    []string
}

// Composite returns the node's key, or key_value when it has a value, as
// envoyproxy/ratelimit names it.
func (n *Node) Composite() string {
	if n.AddressText != "" {
		return n.Key + "_" + n.AddressText
	}
	if n.Value == "" {
		return n.Key
	}
	return n.Key + "_" + n.Value
}

// isAddress reports whether n matches by address (Node.Addresses).
func (n *Node) isAddress() bool { return n.AddressText != "" }

// matchesAddress reports whether v, an entry's value, is an address n's
// lists select.
func (n *Node) matchesAddress(v string) bool {
	a, ok := clientip.ParseHop(v)
	if !ok {
		return false
	}
	return (n.Addresses == nil || n.Addresses.Contains(a)) && (n.NotAddresses == nil || !n.NotAddresses.Contains(a))
}

// Add adds child to n's next level. When n already has a child with the
// same key and value, Add returns it and leaves n unchanged; otherwise it
// returns nil.
func (n *Node) Add(child *Node) (dup *Node) { return n.level.insert(&n.Children, child, false) }

// AddEnvoyproxy adds child to n's next level with envoyproxy/ratelimit's
// rule for duplicates: a child whose composite key (Composite: key, or
// key_value) is already there, whatever its key and value, is a
// duplicate, returned, and n is left unchanged.
func (n *Node) AddEnvoyproxy(child *Node) (dup *Node) {
	return n.level.insert(&n.Children, child, true)
}

// level indexes the children of one node for matching, both ways: by key
// and value (Portero's matching) and by composite key_value string
// (envoyproxy/ratelimit's, see MatchEnvoyproxy).
type level struct {
	exact map[Entry]*Node
	// wildcards are the nodes with a wildcard value and the address
	// nodes, in the order they were added.
	wildcards []*Node
	keyOnly   map[string]*Node
	composite map[string]*Node // no address node: its name is no entry's
}

func (l *level) add(d *Node) {
	if l.exact == nil {
		l.exact = map[Entry]*Node{}
		l.keyOnly = map[string]*Node{}
		l.composite = map[string]*Node{}
	}
	if d.isAddress() {
		l.wildcards = append(l.wildcards, d)
		return
	}
	d.composite = d.Composite()
	l.composite[d.composite] = d
	if strings.Contains(d.Value, "*") {
		d.cparts = strings.Split(d.composite, "*")
	}
	switch {
	case d.Value == "":
		l.keyOnly[d.Key] = d
	case strings.Contains(d.Value, "*"):
		d.parts = strings.Split(d.Value, "*")
		l.wildcards = append(l.wildcards, d)
	default:
		l.exact[Entry{d.Key, d.Value}] = d
	}
}

// insert adds d to l and to list, the same level's nodes in order, unless
// l already has its duplicate (by key and value, or by composite name with
// envoyproxy's rule), which it returns instead.
func (l *level) insert(list *[]*Node, d *Node, envoyproxy bool) (dup *Node) {
	if envoyproxy {
		dup = l.findComposite(d)
	} else {
		dup = l.findSame(d)
	}
	if dup != nil {
		return dup
	}
	l.add(d)
	*list = append(*list, d)
	return nil
}

// findComposite returns the node of l with d's composite name, or nil:
// envoyproxy/ratelimit's duplicates.
func (l *level) findComposite(d *Node) *Node {
	if d.isAddress() {
		return l.findSame(d)
	}
	return l.composite[d.Composite()]
}

// findSame returns the node of l with d's key and value (or addresses), or
// nil.
func (l *level) findSame(d *Node) *Node {
	if d.isAddress() {
		for _, w := range l.wildcards {
			if w.Key == d.Key && w.AddressText == d.AddressText {
				return w
			}
		}
		return nil
	}
	if d.Value == "" {
		return l.keyOnly[d.Key]
	}
	if strings.Contains(d.Value, "*") {
		for _, w := range l.wildcards {
			if w.Key == d.Key && w.Value == d.Value {
				return w
			}
		}
		return nil
	}
	return l.exact[Entry{d.Key, d.Value}]
}

// find returns the node of l entry e selects with Portero's rules (exact
// value, then the first wildcard or address node, then key only) and, when
// that node shares one counter (share_threshold) among the values its
// pattern matches, the pattern; nil when none.
func (l *level) find(e Entry) (n *Node, shared string) {
	if d := l.exact[e]; d != nil {
		return d, ""
	}
	for _, d := range l.wildcards {
		if d.Key == e.Key && d.matches(e.Value) {
			if d.ShareThreshold {
				shared = d.Value + d.AddressText
			}
			return d, shared
		}
	}
	return l.keyOnly[e.Key], ""
}

// findEnvoyproxy is find with envoyproxy/ratelimit's rules, on composite
// strings (see Domain.MatchEnvoyproxy); a shared pattern is the node's
// composite pattern less the entry's key and '_'.
func (l *level) findEnvoyproxy(e Entry) (n *Node, shared string) {
	full := e.Key + "_" + e.Value
	if d := l.composite[full]; d != nil {
		return d, ""
	}
	for _, w := range l.wildcards {
		if w.isAddress() && w.Key == e.Key && w.matchesAddress(e.Value) || !w.isAddress() && globMatch(w.cparts, full) {
			if w.ShareThreshold {
				shared = w.AddressText
				if !w.isAddress() {
					shared = strings.TrimPrefix(w.composite, e.Key+"_")
				}
			}
			return w, shared
		}
	}
	return l.composite[e.Key], ""
}

// matches reports whether v matches n, a wildcard or an address node.
func (n *Node) matches(v string) bool {
	if n.isAddress() {
		return n.matchesAddress(v)
	}
	return globMatch(n.parts, v)
}

// globMatch reports whether v matches the pattern split at its '*'s: each
// '*' matches any run of characters, the empty one included.
func globMatch(parts []string, v string) bool {
	if len(parts) == 1 {
		return parts[0] == v
	}
	if !strings.HasPrefix(v, parts[0]) {
		return false
	}
	v = v[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(v, p)
		if i < 0 {
			return false
		}
		v = v[i+len(p):]
	}
	return len(v) >= len(last) && strings.HasSuffix(v, last)
}

// Domain is one domain's tree.
type Domain struct {
	Name string
	// Nodes are the top level, in the order they were added.
	Nodes []*Node
	// Files lists the files that contributed to the domain (several when
	// domains are merged).
	Files []string
	root  level
}

// NewDomain returns an empty domain read from file.
func NewDomain(name, file string) *Domain {
	return &Domain{Name: name, Files: []string{file}}
}

// Add adds n to d's top level. When d already has a node with the same key
// and value, Add returns it and leaves d unchanged; otherwise it returns
// nil.
func (d *Domain) Add(n *Node) (dup *Node) { return d.root.insert(&d.Nodes, n, false) }

// AddEnvoyproxy is Node.AddEnvoyproxy for d's top level.
func (d *Domain) AddEnvoyproxy(n *Node) (dup *Node) { return d.root.insert(&d.Nodes, n, true) }

// Match is the result of looking a request descriptor up.
type Match struct {
	// Node is the configuration node at the descriptor's last level; nil
	// when the descriptor matched no node at that depth.
	Node *Node
	// Limit is Node.Limit: nil when there is no limit to apply.
	Limit *Limit
	// patterns holds, per entry, the wildcard pattern that matched it when
	// that node has share_threshold (the store key then uses the pattern,
	// not the value); nil when there is none.
	patterns []string
}

// Shared returns the wildcard pattern entry i matched when that node shares
// one counter among all its values (share_threshold), and whether it did.
func (m Match) Shared(i int) (string, bool) {
	if i < len(m.patterns) && m.patterns[i] != "" {
		return m.patterns[i], true
	}
	return "", false
}

// Match looks entries up in d, level by level, with envoyproxy/ratelimit's
// rules (exact value, then wildcard in file order, then key only; the limit
// must sit at the level of the last entry).
func (d *Domain) Match(entries []Entry) Match { return d.match(entries, false) }

// MatchEnvoyproxy looks entries up in d exactly as envoyproxy/ratelimit
// does, on composite strings: at each level the child whose composite key
// (key_value, see Node.Composite) is the entry's key + "_" + value, then
// the first wildcard child (in order) whose composite pattern matches that
// string, then the child whose composite key is the entry's key alone.
// Where keys and values hold '_' this can match what Match does not: the
// entry (a_b, c) matches the node (a, b_c), and (a_b, x) falls back to the
// node (a, b). A shared wildcard (share_threshold) counts under its value
// pattern, as there.
func (d *Domain) MatchEnvoyproxy(entries []Entry) Match { return d.match(entries, true) }

// match is Match, or MatchEnvoyproxy when envoyproxy is set.
func (d *Domain) match(entries []Entry, envoyproxy bool) Match {
	var m Match
	lv := &d.root
	for i, e := range entries {
		var n *Node
		var shared string
		if envoyproxy {
			n, shared = lv.findEnvoyproxy(e)
		} else {
			n, shared = lv.find(e)
		}
		if n == nil {
			return Match{}
		}
		if shared != "" {
			if m.patterns == nil {
				m.patterns = make([]string, len(entries))
			}
			m.patterns[i] = shared
		}
		if i == len(entries)-1 {
			m.Node, m.Limit = n, n.Limit
			return m
		}
		if len(n.Children) == 0 {
			return Match{}
		}
		lv = &n.level
	}
	return Match{}
}

// EnvoyproxyKey returns envoyproxy/ratelimit's cache key of a descriptor
// without its window: prefix (its CACHE_KEY_PREFIX), the domain, "_", then
// key_value_ for each entry, an entry matched by a shared wildcard
// contributing the pattern instead of its value. The engine's counters add
// the window's start (portero.Count), which completes the key
// envoyproxy/ratelimit writes to Redis.
func EnvoyproxyKey(prefix, domain string, entries []Entry, m Match) string {
	n := len(prefix) + len(domain) + 1
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	// A Builder: its String is the key without a copy (one allocation).
	var b strings.Builder
	b.Grow(n)
	b.WriteString(prefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range entries {
		b.WriteString(e.Key)
		b.WriteByte('_')
		if p, ok := m.Shared(i); ok {
			b.WriteString(p)
		} else {
			b.WriteString(e.Value)
		}
		b.WriteByte('_')
	}
	return b.String()
}

// Config is a loaded configuration: a set of domains. It is immutable once
// built and safe for concurrent use; reloading builds a new Config.
type Config struct {
	domains map[string]*Domain
	files   []string
}

// NewConfig returns the configuration of domains (distinct names; merge
// domains before), loaded from files.
func NewConfig(domains []*Domain, files []string) (*Config, error) {
	c := &Config{domains: make(map[string]*Domain, len(domains)), files: files}
	for _, d := range domains {
		if _, dup := c.domains[d.Name]; dup {
			return nil, fmt.Errorf("descriptor: domain %q given twice", d.Name)
		}
		c.domains[d.Name] = d
	}
	return c, nil
}

// Domain returns the named domain, or nil.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Domains returns the domain names, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	names := make([]string, 0, len(c.domains))
	for n := range c.domains {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Walk calls f for every node of every domain: domains in name order,
// each tree in file order, a node before its children.
func (c *Config) Walk(f func(d *Domain, n *Node)) {
	var walk func(d *Domain, nodes []*Node)
	walk = func(d *Domain, nodes []*Node) {
		for _, n := range nodes {
			f(d, n)
			walk(d, n.Children)
		}
	}
	for _, name := range c.Domains() {
		d := c.Domain(name)
		walk(d, d.Nodes)
	}
}

// Files returns the files the configuration was loaded from, in load order.
func (c *Config) Files() []string {
	if c == nil {
		return nil
	}
	return c.files
}

// Key formats entries as envoyproxy/ratelimit does in its stats: key or
// key_value per entry, joined by ".".
func Key(entries []Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// Keys formats the keys of entries, without their values, joined by ".":
// the name of an override's rule.
func Keys(entries []Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
	}
	return b.String()
}

// StoreKey returns the key a descriptor is counted under in the store:
// the domain and the entries, unambiguously joined (a '|' between parts,
// '=' between key and value, '\' escaping those three). An entry matched by
// a shared wildcard (share_threshold) contributes the wildcard pattern
// instead of its value, so all such values share one counter.
func StoreKey(domain string, entries []Entry, m Match) string {
	n := len(domain) + 1
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	var b strings.Builder // one allocation, as in EnvoyproxyKey
	b.Grow(n)
	writeEscaped(&b, domain)
	for i, e := range entries {
		b.WriteByte('|')
		writeEscaped(&b, e.Key)
		b.WriteByte('=')
		if p, ok := m.Shared(i); ok {
			// A pattern is marked with a leading '*' that no escaped
			// value can produce unescaped, so it never collides with a value.
			b.WriteString(`\*`)
			writeEscaped(&b, p)
			continue
		}
		writeEscaped(&b, e.Value)
	}
	return b.String()
}

// writeEscaped writes s with a backslash before each '|', '=' and backslash.
func writeEscaped(b *strings.Builder, s string) {
	for {
		i := strings.IndexAny(s, `|=\`)
		if i < 0 {
			b.WriteString(s)
			return
		}
		b.WriteString(s[:i])
		b.WriteByte('\\')
		b.WriteByte(s[i])
		s = s[i+1:]
	}
}
