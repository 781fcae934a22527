// Package envoyconf reads envoyproxy/ratelimit's YAML configuration,
// unchanged, and matches request descriptors against it the way that
// service does, so that an Envoy user can point Envoy at Portero with the
// files they already have and get the same decisions.
//
// # Format
//
// One file holds one domain:
//
//	domain: edge
//	descriptors:
//	  - key: remote_address            # every client address: 10 per second
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	  - key: remote_address            # one address: blocked
//	    value: 50.0.0.5
//	    rate_limit: {unit: second, requests_per_unit: 0}
//	  - key: api_key                   # two levels: (api_key, X), (plan, gold)
//	    descriptors:
//	      - key: plan
//	        value: gold
//	        rate_limit: {name: gold, unit: minute, requests_per_unit: 600}
//
// Every field of envoyproxy/ratelimit is accepted: domain; descriptors with
// key, value (with '*' wildcards), rate_limit {unit, requests_per_unit,
// unlimited, name, replaces}, shadow_mode, detailed_metric, value_to_metric
// and share_threshold. Unknown fields are errors, as there. Units are
// second, minute, hour, day, week, month (30 days) and year (365 days), in
// any case.
//
// Portero adds one optional field, rate_limit.portero, that selects any
// Portero algorithm for a descriptor:
//
//	rate_limit:
//	  unit: second
//	  requests_per_unit: 10
//	  portero: {algorithm: token-bucket, burst: 40}
//
// Without it a limit is envoyproxy/ratelimit's clock-aligned fixed window:
// portero.FixedWindow with Window = unit and Count = requests_per_unit.
//
// # Matching
//
// A request descriptor is an ordered list of (key, value) entries. Entry i
// is looked up at level i of the domain's tree: first the node with that key
// and exactly that value, then the nodes with that key and a wildcard value
// in file order, then the node with that key and no value. A limit applies
// only when it sits at the level of the descriptor's last entry: a
// two-entry descriptor never matches a one-level rule, and a one-entry
// descriptor never matches a rule nested deeper.
//
// Errors name the file, line, column and field.
package envoyconf

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/sfv"
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

// RateLimit is the rate_limit of a configuration node.
type RateLimit struct {
	// Name is the rate_limit's name, the target of other limits' replaces;
	// empty when not given.
	Name string
	// FullKey is envoyproxy/ratelimit's name for the node, as in its stats:
	// the domain and, for every level, key or key_value, joined by ".".
	FullKey string
	// Unit and RequestsPerUnit are the limit as written; both zero when
	// Unlimited.
	Unit            Unit
	RequestsPerUnit uint32
	// Unlimited answers OK without counting.
	Unlimited bool
	// Replaces names the limits this one suppresses when both match
	// descriptors of one request.
	Replaces []string
	// Rule is what the store counts under: Name (or FullKey) as the rule
	// name, the algorithm (portero.FixedWindow unless the portero extension
	// chose another) and the limit. Its Limit is the zero value when
	// RequestsPerUnit is 0 (every request is refused without counting) or
	// when Unlimited.
	Rule portero.Rule
	// MaxCost is the largest cost one request can have under Rule; a larger
	// hits_addend is over the limit, as in envoyproxy/ratelimit.
	MaxCost int64

	// quotedName and policyItem are QuotedName and PolicyItem, computed
	// once when the limit is built (see precompute) so that the doors do
	// not format static header text on every request.
	quotedName, policyItem string
}

// precompute fills the header forms of r; call it once r is complete.
func (r *RateLimit) precompute() {
	r.quotedName = string(sfv.AppendString(nil, r.PolicyName()))
	r.policyItem = string(r.appendPolicyItem(nil))
}

// QuotedName returns PolicyName as a Structured Field String (RFC 9651),
// the form RateLimit and RateLimit-Policy headers name the limit by.
func (r *RateLimit) QuotedName() string {
	if r.quotedName != "" {
		return r.quotedName
	}
	return string(sfv.AppendString(nil, r.PolicyName()))
}

// PolicyItem returns the limit's item in a RateLimit-Policy header
// (draft-ietf-httpapi-ratelimit-headers-11): QuotedName, then
// ";q=" requests_per_unit, ";w=" the unit in seconds and, for a Portero
// algorithm with a burst, ";portero-burst=" the burst. It never changes for
// a given limit, so it is formatted once.
func (r *RateLimit) PolicyItem() string {
	if r.policyItem != "" {
		return r.policyItem
	}
	return string(r.appendPolicyItem(nil))
}

func (r *RateLimit) appendPolicyItem(b []byte) []byte {
	if r.quotedName != "" {
		b = append(b, r.quotedName...)
	} else {
		b = sfv.AppendString(b, r.PolicyName())
	}
	b = append(b, ";q="...)
	b = strconv.AppendUint(b, uint64(r.RequestsPerUnit), 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, int64(r.Unit.Duration()/time.Second), 10)
	if burst := r.Rule.Limit.Burst; burst > 0 {
		b = append(b, ";portero-burst="...)
		b = strconv.AppendInt(b, burst, 10)
	}
	return b
}

// PolicyName returns the name used in RateLimit-Policy headers and
// decisions: Name when given, otherwise FullKey.
func (r *RateLimit) PolicyName() string {
	if r.Name != "" {
		return r.Name
	}
	return r.FullKey
}

// Blocked reports whether the limit admits nothing (requests_per_unit 0).
func (r *RateLimit) Blocked() bool { return !r.Unlimited && r.RequestsPerUnit == 0 }

// Descriptor is one node of a domain's tree.
type Descriptor struct {
	Key, Value string
	// RateLimit is nil when the node has no limit (only children, or a
	// whitelisted key).
	RateLimit *RateLimit
	// ShadowMode counts requests but never refuses them.
	ShadowMode bool
	// DetailedMetric and ValueToMetric are accepted for compatibility; they
	// only shape envoyproxy/ratelimit's metric names.
	DetailedMetric, ValueToMetric bool
	// ShareThreshold makes every value that matches a wildcard share one
	// counter, instead of one counter per value.
	ShareThreshold bool
	// Descriptors are the children: the next level.
	Descriptors []*Descriptor
	// File and Line locate the node in its file.
	File string
	Line int

	level  level
	prefix string // the value before the first '*' (for fast rejection)
	parts  []string
}

// level indexes the children of one node for matching.
type level struct {
	exact     map[Entry]*Descriptor
	wildcards []*Descriptor
	keyOnly   map[string]*Descriptor
}

func (l *level) add(d *Descriptor) {
	if l.exact == nil {
		l.exact = map[Entry]*Descriptor{}
		l.keyOnly = map[string]*Descriptor{}
	}
	switch {
	case d.Value == "":
		l.keyOnly[d.Key] = d
	case strings.Contains(d.Value, "*"):
		d.parts = strings.Split(d.Value, "*")
		d.prefix = d.parts[0]
		l.wildcards = append(l.wildcards, d)
	default:
		l.exact[Entry{d.Key, d.Value}] = d
	}
}

func (l *level) find(e Entry) *Descriptor {
	if d := l.exact[e]; d != nil {
		return d
	}
	for _, d := range l.wildcards {
		if d.Key == e.Key && globMatch(d.parts, e.Value) {
			return d
		}
	}
	return l.keyOnly[e.Key]
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
	Name        string
	Descriptors []*Descriptor
	// Files lists the files that contributed to the domain (several when
	// domains are merged).
	Files []string
	root  level
}

// Match is the result of looking a request descriptor up.
type Match struct {
	// Node is the configuration node at the descriptor's last level; nil
	// when the descriptor matched no node at that depth.
	Node *Descriptor
	// Limit is Node.RateLimit: nil when there is no limit to apply.
	Limit *RateLimit
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
func (d *Domain) Match(entries []Entry) Match {
	var m Match
	lv := &d.root
	for i, e := range entries {
		n := lv.find(e)
		if n == nil {
			return Match{}
		}
		if n.ShareThreshold && n.parts != nil {
			if m.patterns == nil {
				m.patterns = make([]string, len(entries))
			}
			m.patterns[i] = n.Value
		}
		if i == len(entries)-1 {
			m.Node, m.Limit = n, n.RateLimit
			return m
		}
		if len(n.Descriptors) == 0 {
			return Match{}
		}
		lv = &n.level
	}
	return Match{}
}

// Config is a loaded configuration: a set of domains. It is immutable and
// safe for concurrent use; reloading builds a new Config.
type Config struct {
	domains map[string]*Domain
	files   []string
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

// Files returns the files the configuration was loaded from, in load order.
func (c *Config) Files() []string {
	if c == nil {
		return nil
	}
	return c.files
}

// makeRule builds the portero rule of a limit.
func makeRule(name string, unit Unit, rpu uint32, alg portero.Algorithm, burst int64) (portero.Rule, int64, error) {
	r := portero.Rule{Name: name, Algorithm: alg}
	if rpu == 0 {
		return r, 0, nil
	}
	r.Limit = portero.Limit{Count: int64(rpu), Window: unit.Duration(), Burst: burst}
	if err := r.Validate(); err != nil {
		return r, 0, err
	}
	max := r.Limit.Capacity()
	if isWindow(alg) {
		max = r.Limit.Count
	}
	return r, max, nil
}

// OverrideRule returns the rule for a descriptor's limit override (the
// "limit" Envoy attaches to a descriptor): a fixed window of rpu per unit,
// named after the domain and the descriptor's keys, without their values
// ("edge.remote_address"): the values are store keys under the rule (see
// StoreKey), so that a client sending a new value each time adds a key,
// bounded and expiring like any key, and not a rule. It reports an error
// for an unknown unit. A zero rpu yields a rule with a zero Limit: every
// request is over the limit.
func OverrideRule(domain string, entries []Entry, rpu uint32, unit Unit) (*RateLimit, error) {
	if !unit.Valid() {
		return nil, fmt.Errorf("limit override: invalid unit %d", int32(unit))
	}
	name := domain + "." + DescriptorKeys(entries)
	r, max, err := makeRule(name, unit, rpu, portero.FixedWindow, 0)
	if err != nil {
		return nil, fmt.Errorf("limit override: %w", err)
	}
	rl := &RateLimit{FullKey: name, Unit: unit, RequestsPerUnit: rpu, Rule: r, MaxCost: max}
	rl.precompute()
	return rl, nil
}

// DescriptorKey formats entries as envoyproxy/ratelimit does in its stats:
// key or key_value per entry, joined by ".".
func DescriptorKey(entries []Entry) string {
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

// DescriptorKeys formats the keys of entries, without their values, joined
// by ".": the name of an override's rule.
func DescriptorKeys(entries []Entry) string {
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
	b := make([]byte, 0, n)
	b = appendEscaped(b, domain)
	for i, e := range entries {
		b = append(b, '|')
		b = appendEscaped(b, e.Key)
		b = append(b, '=')
		if p, ok := m.Shared(i); ok {
			// A pattern is marked with a leading '*' that no escaped
			// value can produce unescaped, so it never collides with a value.
			b = append(b, '\\', '*')
			b = appendEscaped(b, p)
			continue
		}
		b = appendEscaped(b, e.Value)
	}
	return string(b)
}

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '|' || c == '=' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return b
}
