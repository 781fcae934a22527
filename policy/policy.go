// Package policy is the compiler of Portero's own rules: it decides which
// rules apply to a request, under which key and at what cost, and turns
// that into the engine's hits (Compile). It is the peer of package
// descriptor, which compiles envoyproxy/ratelimit's descriptors; neither
// decides: package engine does, for every door. It knows rules, keys,
// costs and modes, and nothing about HTTP responses, stores or the clock.
//
// Limits stack: a request must pass every rule that applies to it (per user,
// per tenant, global, per endpoint). The engine decides them all-or-nothing:
// when one enforced rule refuses, the request is counted under none of them,
// and the verdict names the rule that refused with that rule's own numbers.
// Rules in shadow mode are counted, reported and measured, but never refuse.
package policy

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
)

// Request is what a door tells the policy about one request. It is built by
// the caller (httplimit builds it from an *http.Request) and only read.
type Request struct {
	// Method is the request method, such as GET.
	Method string
	// Host is the Host header, possibly with a port.
	Host string
	// Path is the decoded URL path.
	Path string
	// Header holds the request headers under canonical names, as in
	// http.Header (which converts to it directly).
	Header map[string][]string
	// ClientIP is the client address the door settled on (after any trusted
	// proxies); the zero Addr when unknown, in which case rules keyed by ip
	// do not apply.
	ClientIP netip.Addr
	// ContentLength is the body size the request declares, in bytes; -1
	// when unknown (chunked), 0 when there is no body.
	ContentLength int64
	// Identity holds values set by earlier middleware, such as "user" and
	// "tenant"; nil when there are none.
	Identity map[string]string
	// Route names the route the door matched, for keys with a route part;
	// empty when the door has none.
	Route string
	// RawQuery is the URL's query string without the "?", for keys with
	// a query part.
	RawQuery string
	// Forwarded reports that ClientIP came from a forwarding header sent
	// by a trusted proxy rather than from the connection, for keys with a
	// forwarded-ip part.
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
	// Enforce refuses the requests the rule does not admit. It is the
	// default (the empty Mode).
	Enforce Mode = "enforce"
	// Shadow counts and reports but never refuses: for dark launches.
	Shadow Mode = "shadow"
)

// Rule is one limit in a policy: which requests (Match), counted under what
// name (Key), how (Algorithm and Limit), at what Cost, in which Mode.
type Rule struct {
	// Name identifies the rule in headers, problem bodies, logs and metrics.
	// Letters, digits and "-_.:/" only, at most 64 bytes; unique in a
	// policy.
	Name string
	// Match selects the requests the rule applies to; the zero value selects
	// all of them.
	Match Match
	// Key says under which name requests are counted.
	Key Key
	// Algorithm is how the rule counts; empty means sliding-counter, or
	// fixed-window for a calendar quota (a Limit with a Period), the only
	// algorithm that counts one.
	Algorithm portero.Algorithm
	// Limit is how much a key may use.
	Limit portero.Limit
	// Cost is how many units one request uses; the zero value is 1.
	Cost Cost
	// Mode is Enforce (the default when empty) or Shadow.
	Mode Mode
	// Responses, when not empty, makes the rule count only the requests
	// whose response status is in the set (see Settlement): checked before
	// the request, counted after.
	Responses StatusSet
	// Reserve is, for a cost from the response (response-header:NAME,
	// response-bytes), the estimate counted when the rule decides, settled
	// once the response reports the cost; 0 means 1.
	Reserve int64
	// Concurrency, when its Max is set, makes the rule a concurrency limit
	// instead of a rate limit: at most Concurrency.Max requests in flight at
	// once per key, each holding a lease for Concurrency.TTL (renewed while
	// it runs; 0 means portero.DefaultLeaseTTL). Algorithm, Limit and Cost
	// must then be zero; Concurrency.Name is the rule's Name. A key that
	// names the client (ip, header, user, tenant, identity) makes it the
	// client's own limit (refused with 429); any other key (global, route,
	// method, host) the service's (engine.Rule.Service: 503). Doors decide
	// it with engine.Engine.Admit, which hands them the lease to give back
	// when the request ends.
	Concurrency portero.ConcurrencyRule

	store       portero.Rule
	engine      *engine.Rule
	maxCost     int64
	matchString string // Match.String(), the route key part of rules keyed by route
	index       int
}

// Index returns the rule's position in its policy's Rules, so that doors
// can keep per-rule data (such as preformatted headers) in a slice.
func (r *Rule) Index() int { return r.index }

// Shadow reports whether the rule is in shadow mode.
func (r *Rule) Shadow() bool { return r.Mode == Shadow }

// IsConcurrency reports whether the rule is a concurrency limit
// (Rule.Concurrency).
func (r *Rule) IsConcurrency() bool { return r.Concurrency != (portero.ConcurrencyRule{}) }

// Engine returns the rule as the engine decides it: its store rule, shadow
// mode, quota unit, Index and header text.
func (r *Rule) Engine() *engine.Rule { return r.engine }

// StoreRule returns the portero.Rule a store counts this rule under. Two
// policies whose rules have equal store rules share counters, which is why a
// reload keeps the counters of the rules it leaves unchanged. A concurrency
// rule's store rule has a Name only: its leases are kept under the name
// and the key, whatever its Max.
func (r *Rule) StoreRule() portero.Rule { return r.store }

// Options tune a policy. The zero value is the default.
type Options struct {
	// IPv6Prefix is the prefix length IPv6 clients are grouped by in keys
	// with an ip part: 0 means 64, since one subscriber usually holds a
	// whole /64 and could otherwise rotate addresses freely. At most 128.
	IPv6Prefix int
	// IPv4Prefix is the same for IPv4: 0 means 32 (one address).
	IPv4Prefix int
}

// Policy is a validated, immutable list of rules. It is safe for concurrent
// use; to change rules, build a new Policy and swap it in.
type Policy struct {
	rules   []*Rule
	v6      int
	v4      int
	settles bool // some rule is settled after the response
}

// New validates the rules and returns a policy. It reports every problem it
// finds, each prefixed with the rule's index and name.
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
	r.store = portero.Rule{Name: r.Name, Algorithm: r.Algorithm, Limit: r.Limit}
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
	case !r.Responses.IsZero() || r.Reserve != 0:
		return errors.New("concurrency: a concurrency limit counts every request in flight: it takes no responses and no reserve")
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

// RuleError is returned by Compile when a request's cost under a rule
// cannot be read: malformed (ErrBadCost) or missing (ErrLengthRequired).
type RuleError struct {
	Rule string
	Err  error
}

func (e *RuleError) Error() string { return fmt.Sprintf("rule %q: %v", e.Rule, e.Err) }

// Unwrap returns the cause.
func (e *RuleError) Unwrap() error { return e.Err }

// RequestHeaders returns the request header fields p's rules read, under
// canonical names, each once, in rule order: their keys' header parts
// (Cookie for a cookie part), their costs' header and their matches'
// headers. A door that records requests to decide them again later
// (`portero replay`) records these.
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
func (p *Policy) Cookies() []string {
	var out []string
	for _, r := range p.rules {
		for _, part := range r.Key.parts {
			if part.kind == keyCookie && !slices.Contains(out, part.name) {
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
// cost from (response-header:NAME), under canonical names, each once, in
// rule order: what a door that records responses keeps, to settle them
// again later.
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

// Queries returns the names of the query arguments p's keys read
// (query:NAME), each once, in rule order.
func (p *Policy) Queries() []string {
	var out []string
	for _, r := range p.rules {
		for _, part := range r.Key.parts {
			if part.kind == keyQuery && !slices.Contains(out, part.name) {
				out = append(out, part.name)
			}
		}
	}
	return out
}

// QueryValue returns the first value of argument name in the raw query
// q, as a key's query:NAME part reads it.
func QueryValue(q, name string) (string, bool) { return queryValue(q, name) }

// KeyOnlyHeaders returns the request header fields p reads only in its
// keys (header:NAME parts) — never to match or to cost —, under canonical
// names, each once, in rule order: only their values' equality matters,
// so a door that records requests may record them hashed.
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

// ReadsQuery reports whether some rule's key has a query part, so that a
// door that records requests knows it must keep their query strings.
func (p *Policy) ReadsQuery() bool {
	for _, r := range p.rules {
		for _, part := range r.Key.parts {
			if part.kind == keyQuery {
				return true
			}
		}
	}
	return false
}
