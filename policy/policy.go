// Package policy is the compiler of Portero's own rules: which rules apply
// to a request, under which key and at what cost, as the engine's hits
// (Compile). It is the peer of package descriptor, which compiles
// envoyproxy/ratelimit's descriptors; the engine decides for both. Limits
// stack: a request must pass every rule that applies to it, all or nothing;
// shadow rules are counted but never refuse.
package policy

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
)

// Request is the policy's view of one request, only read.
type Request struct {
	Method string
	Host   string // the Host header, possibly with a port
	Path   string // decoded
	// Header holds the request headers under canonical names.
	Header map[string][]string
	// ClientIP is the zero Addr when unknown: rules keyed by ip do not
	// apply then.
	ClientIP      netip.Addr
	ContentLength int64             // declared; -1 when unknown, 0 for no body
	Identity      map[string]string // set by earlier middleware, such as "user"
	Route         string            // the route the request matched
	RawQuery      string            // without "?"
	// Forwarded reports that ClientIP came from a trusted proxy's
	// forwarding header.
	Forwarded bool
}

func (r *Request) header(name string) (string, bool) {
	v := r.Header[name]
	if len(v) == 0 {
		return "", false
	}
	return strings.TrimSpace(v[0]), true
}

// Mode says whether a rule may refuse requests.
type Mode string

const (
	// Enforce refuses the requests the rule does not admit; the default.
	Enforce Mode = "enforce"
	// Shadow counts and reports but never refuses.
	Shadow Mode = "shadow"
)

// Rule is one limit in a policy: which requests (Match), counted under what
// name (Key), how (Algorithm and Limit), at what Cost, in which Mode.
type Rule struct {
	// Name identifies the rule in headers, bodies, logs and metrics:
	// letters, digits and "-_.:/", at most 64 bytes, unique.
	Name  string
	Match Match // the zero value selects every request
	Key   Key
	// Algorithm is empty for sliding-counter (fixed-window for a calendar
	// quota).
	Algorithm portero.Algorithm
	Limit     portero.Limit
	Cost      Cost // the zero value is 1
	Mode      Mode // empty means Enforce
	// Responses, when not empty, counts only the requests whose response
	// status is in it: checked before, counted after.
	Responses StatusSet
	// Reserve is, for a cost from the response, the estimate counted at the
	// decision and settled after; 0 means 1.
	Reserve int64
	// Budget, when positive, serves the rule from leased budgets
	// (store/budget) sized for about Budget of each instance's traffic.
	Budget time.Duration
	// Concurrency, when its Max is set, makes the rule a concurrency limit:
	// at most Max requests in flight per key, each holding a lease (no
	// Algorithm, Limit or Cost). A key that names the client makes it the
	// client's own limit (429); any other the service's (503).
	Concurrency portero.ConcurrencyRule

	store       portero.Rule
	engine      *engine.Rule
	maxCost     int64
	matchString string // Match.String(), the route key part of rules keyed by route
	index       int
}

// Index returns the rule's position in its policy's Rules.
func (r *Rule) Index() int { return r.index }

// Shadow reports whether the rule is in shadow mode.
func (r *Rule) Shadow() bool { return r.Mode == Shadow }

// IsConcurrency reports whether the rule is a concurrency limit.
func (r *Rule) IsConcurrency() bool { return r.Concurrency != (portero.ConcurrencyRule{}) }

// Engine returns the rule as the engine decides it.
func (r *Rule) Engine() *engine.Rule { return r.engine }

// StoreRule returns the portero.Rule a store counts this rule under: equal
// store rules share counters, so a reload keeps those of unchanged rules
// (a concurrency rule's has a Name only).
func (r *Rule) StoreRule() portero.Rule { return r.store }

// Options tune a policy. The zero value is the default.
type Options struct {
	// IPv6Prefix groups IPv6 clients in ip keys: 0 means 64, since one
	// subscriber usually holds a whole /64; IPv4Prefix: 0 means 32.
	IPv6Prefix, IPv4Prefix int
}

// Policy is a validated, immutable list of rules, safe for concurrent use.
type Policy struct {
	rules   []*Rule
	v6      int
	v4      int
	settles bool // some rule is settled after the response
}

// New validates the rules and returns a policy, or every problem it finds,
// each prefixed with the rule's index and name.
func New(rules []Rule, opts Options) (*Policy, error) {
	p := &Policy{v6: 64, v4: 32}
	var errs []error
	if opts.IPv6Prefix != 0 {
		if opts.IPv6Prefix < 1 || opts.IPv6Prefix > 128 {
			errs = append(errs, fmt.Errorf("ipv6 prefix /%d: want 1 to 128", opts.IPv6Prefix))
		}
		p.v6 = opts.IPv6Prefix
	}
	if opts.IPv4Prefix != 0 {
		if opts.IPv4Prefix < 1 || opts.IPv4Prefix > 32 {
			errs = append(errs, fmt.Errorf("ipv4 prefix /%d: want 1 to 32", opts.IPv4Prefix))
		}
		p.v4 = opts.IPv4Prefix
	}
	names := map[string]int{}
	for i := range rules {
		r := rules[i] // a copy: the policy owns its rules
		if err := r.prepare(); err != nil {
			errs = append(errs, fmt.Errorf("rules[%d] (%s): %w", i, r.Name, err))
			continue
		}
		if j, dup := names[r.Name]; dup {
			errs = append(errs, fmt.Errorf("rules[%d] (%s): name already used by rules[%d]", i, r.Name, j))
			continue
		}
		names[r.Name] = i
		r.index = len(p.rules)
		er := engine.Rule{Rule: r.store, Shadow: r.Mode == Shadow, Unit: r.Cost.Unit(), Index: r.index}
		if r.IsConcurrency() {
			er.Unit, er.Concurrency, er.Service = engine.ConcurrencyUnit, r.Concurrency, !r.Key.PerClient()
		}
		ann, err := header.Announce(&er)
		if err == nil {
			er.Announce = ann
			r.engine, err = engine.NewRule(er)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("rules[%d] (%s): %w", i, r.Name, err))
			continue
		}
		p.rules = append(p.rules, &r)
		p.settles = p.settles || r.AfterResponse()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// ValidName reports why name cannot name a rule, or nil.
func ValidName(name string) error {
	if name == "" {
		return errors.New("name: required")
	}
	if len(name) > 64 {
		return fmt.Errorf("name %q: at most 64 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:/", c) >= 0 {
			continue
		}
		return fmt.Errorf("name %q: only letters, digits and -_.:/ are allowed", name)
	}
	return nil
}

func (r *Rule) prepare() error {
	if err := ValidName(r.Name); err != nil {
		return err
	}
	if r.Algorithm == "" && !r.IsConcurrency() {
		r.Algorithm = portero.SlidingCounter
		if r.Limit.IsCalendar() {
			r.Algorithm = portero.FixedWindow
		}
	}
	switch r.Mode {
	case "":
		r.Mode = Enforce
	case Enforce, Shadow:
	default:
		return fmt.Errorf("mode %q: want enforce or shadow", string(r.Mode))
	}
	if r.Key.IsZero() {
		return errors.New("key: required")
	}
	if err := r.Match.Compile(); err != nil {
		return fmt.Errorf("match: %w", err)
	}
	r.matchString = r.Match.String()
	if r.IsConcurrency() {
		return r.prepareConcurrency()
	}
	r.store = portero.Rule{Name: r.Name, Algorithm: r.Algorithm, Limit: r.Limit, Budget: r.Budget}
	if err := r.store.Validate(); err != nil {
		return err
	}
	maxCost, err := algorithm.MaxCost(r.Algorithm, r.Limit)
	if err != nil {
		return err
	}
	r.maxCost = maxCost
	if r.Cost.fixed > r.maxCost {
		return fmt.Errorf("cost %d: %w: the rule admits at most %d at once", r.Cost.fixed, portero.ErrCostExceedsLimit, r.maxCost)
	}
	return r.prepareSettle()
}

// prepareConcurrency checks a concurrency rule.
func (r *Rule) prepareConcurrency() error {
	switch {
	case r.Algorithm != "" || r.Limit != (portero.Limit{}):
		return errors.New("concurrency: a concurrency limit takes no algorithm and no limit (make a second rule for the rate)")
	case r.Cost != (Cost{}):
		return errors.New("concurrency: a concurrency limit takes no cost: each request in flight holds one slot")
	case !r.Responses.IsZero() || r.Reserve != 0 || r.Budget != 0:
		return errors.New("concurrency: a concurrency limit counts every request in flight: it takes no responses, no reserve and no budget")
	case r.Concurrency.Name != "" && r.Concurrency.Name != r.Name:
		return fmt.Errorf("concurrency: named %q, not the rule's name", r.Concurrency.Name)
	}
	r.Concurrency.Name = r.Name
	if err := r.Concurrency.Validate(); err != nil {
		return err
	}
	r.store = portero.Rule{Name: r.Name}
	r.maxCost = 1
	return nil
}

// Rules returns the policy's rules in order. The caller must not change
// them.
func (p *Policy) Rules() []*Rule { return p.rules }

// Rule returns the rule with the given name, or nil.
func (p *Policy) Rule(name string) *Rule {
	for _, r := range p.rules {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// groupIP masks a client address to the policy's prefix for its family.
func (p *Policy) groupIP(a netip.Addr) netip.Prefix {
	a = a.Unmap().WithZone("")
	bits := p.v6
	if a.Is4() {
		bits = p.v4
	}
	pfx, _ := a.Prefix(bits)
	return pfx
}

// RuleError is Compile's error for a cost that cannot be read: malformed
// (ErrBadCost) or missing (ErrLengthRequired).
type RuleError struct {
	Rule string
	Err  error
}

func (e *RuleError) Error() string { return fmt.Sprintf("rule %q: %v", e.Rule, e.Err) }

// Unwrap returns the cause.
func (e *RuleError) Unwrap() error { return e.Err }

// RequestHeaders returns the request header fields p's rules read (keys,
// costs, matches; Cookie for a cookie part), canonical, each once, in rule
// order: what an access log kept for `portero replay` records.
func (p *Policy) RequestHeaders() []string {
	var out []string
	add := func(name string) {
		if name = textproto.CanonicalMIMEHeaderKey(name); !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, r := range p.rules {
		for _, part := range r.Key.parts {
			switch part.kind {
			case keyHeader:
				add(part.name)
			case keyCookie:
				add("Cookie")
			}
		}
		if r.Cost.header != "" {
			add(r.Cost.header)
		}
		names := slices.Collect(maps.Keys(r.Match.Headers))
		slices.Sort(names)
		for _, name := range names {
			add(name)
		}
	}
	return out
}

// Cookies returns the names of the cookies p's keys read (cookie:NAME),
// each once, in rule order.
func (p *Policy) Cookies() []string { return p.keyArgs(keyCookie) }

// Queries returns the names of the query arguments p's keys read
// (query:NAME), each once, in rule order.
func (p *Policy) Queries() []string { return p.keyArgs(keyQuery) }

// ReadsQuery reports whether some rule's key has a query part, so that an
// access log for `portero replay` keeps their query strings.
func (p *Policy) ReadsQuery() bool { return len(p.Queries()) > 0 }

// keyArgs returns the arguments of the key parts of kind, each once.
func (p *Policy) keyArgs(kind keyKind) []string {
	var out []string
	for _, r := range p.rules {
		for _, part := range r.Key.parts {
			if part.kind == kind && !slices.Contains(out, part.name) {
				out = append(out, part.name)
			}
		}
	}
	return out
}

// CookieValue returns the value of cookie name in h's Cookie lines, as a
// key's cookie:NAME part reads it.
func CookieValue(h map[string][]string, name string) (string, bool) {
	return cookieValue(h["Cookie"], name)
}

// ResponseHeaders returns the response header fields p's rules take a
// cost from (response-header:NAME), each once, in rule order.
func (p *Policy) ResponseHeaders() []string {
	var out []string
	for _, r := range p.rules {
		if h := r.Cost.respHeader; h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// ReadsResponseBytes reports whether some rule takes its cost from the
// response's body bytes (response-bytes).
func (p *Policy) ReadsResponseBytes() bool {
	for _, r := range p.rules {
		if r.Cost.respBytes {
			return true
		}
	}
	return false
}

// QueryValue returns the first value of argument name in the raw query
// q, as a key's query:NAME part reads it.
func QueryValue(q, name string) (string, bool) { return queryValue(q, name) }

// KeyOnlyHeaders returns the request header fields p reads only in its
// keys, never to match or to cost: an access log may record them
// hashed.
func (p *Policy) KeyOnlyHeaders() []string {
	valued := map[string]bool{}
	for _, r := range p.rules {
		if r.Cost.header != "" {
			valued[r.Cost.header] = true
		}
		for name := range r.Match.Headers {
			valued[textproto.CanonicalMIMEHeaderKey(name)] = true
		}
	}
	var out []string
	for _, r := range p.rules {
		for _, part := range r.Key.parts {
			if name := textproto.CanonicalMIMEHeaderKey(part.name); part.kind == keyHeader && !valued[name] && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}
