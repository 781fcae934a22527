// Package descriptor compiles envoyproxy/ratelimit's descriptors into the
// engine's hits; it is the peer of package policy, and neither decides.
// internal/config/envoyconf reads the domains from YAML (NewDomain,
// Node.Add, NewLimit).
//
// Entry i of a request descriptor is looked up at level i of its domain's
// tree: the node with that key and value, then the wildcard and address
// nodes in file order, then the node with the key alone. A limit applies
// only at the level of the descriptor's last entry. Each matched limit
// becomes one hit (Compiler.Compile); unlimited and replaced limits none.
package descriptor

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/portero-rl/portero/clientip"
)

// Unit is a rate limit's time unit, numbered as Envoy's
// RateLimitResponse.RateLimit.Unit. Month and year are fixed lengths (30
// and 365 days) from the Unix epoch, as in envoyproxy/ratelimit.
type Unit int32

// The units.
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

var unitDurations = [...]time.Duration{
	Second: time.Second, Minute: time.Minute, Hour: time.Hour, Day: 24 * time.Hour,
	Week: 7 * 24 * time.Hour, Month: 30 * 24 * time.Hour, Year: 365 * 24 * time.Hour,
}

// Duration returns the unit's length; 0 for an unknown unit.
func (u Unit) Duration() time.Duration {
	if u < 0 || int(u) >= len(unitDurations) {
		return 0
	}
	return unitDurations[u]
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
	Limit      *Limit // nil for a node without one
	ShadowMode bool   // counted, never refusing
	// QuotaMode refuses only when every quota descriptor of the request
	// is over its limit.
	QuotaMode bool
	// Metadata has JSON's kinds of values; the Envoy service returns it in
	// dynamic_metadata for descriptors that pass.
	Metadata map[string]any
	// DetailedMetric names the limit's metrics by the request's values;
	// ValueToMetric is accepted and changes nothing.
	DetailedMetric, ValueToMetric bool
	// ShareThreshold makes the values a wildcard (or address lists) match
	// share one counter.
	ShareThreshold bool
	// Addresses and NotAddresses (portero: {addresses, not_addresses})
	// match, in place of a Value, an entry whose value is an IP address in
	// Addresses and not in NotAddresses (either may be nil); such a node is
	// tried with the wildcards. AddressText names the lists as written:
	// "[monitoring]", "![10.0.0.0/8]".
	Addresses, NotAddresses *clientip.AddrSet
	AddressText             string
	Children                []*Node // the next level, in order added
	File                    string
	Line                    int

	level     level
	parts     []string // the value split at its '*'s
	composite string   // Composite(), for envoyproxy/ratelimit's matching
	cparts    []string // composite split at its '*'s
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

// Add adds child to n's next level, unless n has a child with the same key
// and value: that one is returned, and n unchanged.
func (n *Node) Add(child *Node) (dup *Node) { return n.level.insert(&n.Children, child, false) }

// AddEnvoyproxy is Add with envoyproxy/ratelimit's duplicates: children
// with the same Composite name.
func (n *Node) AddEnvoyproxy(child *Node) (dup *Node) {
	return n.level.insert(&n.Children, child, true)
}

// level indexes the children of one node by key and value (Match) and by
// composite name (MatchEnvoyproxy).
type level struct {
	exact     map[Entry]*Node
	wildcards []*Node // wildcard and address nodes, in order added
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

// insert adds d to l and to list, unless l has its duplicate, returned.
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

// findComposite returns the node of l with d's composite name, or nil.
func (l *level) findComposite(d *Node) *Node {
	if d.isAddress() {
		return l.findSame(d)
	}
	return l.composite[d.Composite()]
}

// findSame returns the node of l with d's key and value (or addresses).
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

// find returns the node of l entry e selects (exact value, first wildcard
// or address node, key only) and, for a share_threshold node, its pattern.
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

// findEnvoyproxy is find on composite strings (Domain.MatchEnvoyproxy).
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

// globMatch reports whether v matches the pattern split at its '*'s.
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
	Name  string
	Nodes []*Node  // the top level, in order added
	Files []string // several when domains are merged
	root  level
}

// NewDomain returns an empty domain read from file.
func NewDomain(name, file string) *Domain {
	return &Domain{Name: name, Files: []string{file}}
}

// Add is Node.Add for d's top level.
func (d *Domain) Add(n *Node) (dup *Node) { return d.root.insert(&d.Nodes, n, false) }

// AddEnvoyproxy is Node.AddEnvoyproxy for d's top level.
func (d *Domain) AddEnvoyproxy(n *Node) (dup *Node) { return d.root.insert(&d.Nodes, n, true) }

// Match is the result of looking a request descriptor up.
type Match struct {
	Node  *Node  // at the descriptor's last level; nil for no match
	Limit *Limit // Node.Limit
	// patterns holds, per entry, the share_threshold pattern that matched.
	patterns []string
}

// Shared returns the share_threshold pattern entry i matched, if any.
func (m Match) Shared(i int) (string, bool) {
	if i < len(m.patterns) && m.patterns[i] != "" {
		return m.patterns[i], true
	}
	return "", false
}

// Match looks entries up in d, level by level (see the package doc).
func (d *Domain) Match(entries []Entry) Match { return d.match(entries, false) }

// MatchEnvoyproxy looks entries up exactly as envoyproxy/ratelimit does, on
// composite strings (key_value): where keys and values hold '_', the entry
// (a_b, c) matches the node (a, b_c), which Match does not.
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
// without its window (which the engine's counters add): prefix, domain,
// "_", then key_value_ per entry, a shared pattern in place of its value.
func EnvoyproxyKey(prefix, domain string, entries []Entry, m Match) string {
	var b strings.Builder
	b.Grow(keyLen(len(prefix)+len(domain), entries))
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

// Config is a set of domains, immutable once built.
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

// Key formats entries as envoyproxy/ratelimit's stats do: key or
// key_value per entry, joined by ".".
func Key(entries []Entry) string { return joinEntries(entries, true) }

// Keys joins the keys of entries by ".": the name of an override's rule.
func Keys(entries []Entry) string { return joinEntries(entries, false) }

func joinEntries(entries []Entry, values bool) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if values && e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// keyLen is the length of a store key of entries after n bytes, so that
// building it allocates once.
func keyLen(n int, entries []Entry) int {
	n++
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	return n
}

// StoreKey returns the key a descriptor is counted under: the domain and
// the entries joined by '|' (key=value, '\' escaping "|=\"), a shared
// pattern marked `\*` in place of its value.
func StoreKey(domain string, entries []Entry, m Match) string {
	var b strings.Builder
	b.Grow(keyLen(len(domain), entries))
	writeEscaped(&b, domain)
	for i, e := range entries {
		b.WriteByte('|')
		writeEscaped(&b, e.Key)
		b.WriteByte('=')
		if p, ok := m.Shared(i); ok {
			b.WriteString(`\*`) // no escaped value starts so
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
