package engine

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Rule is a compiled rule: what a store counts under (the embedded
// portero.Rule: name, algorithm, limit), whether it may refuse, and how the
// doors announce it. Build it with NewRule, once per configuration; it is
// then immutable and safe for concurrent use. A compiler (package policy,
// the Envoy descriptor matcher) builds one per rule it loads.
type Rule struct {
	portero.Rule
	// Shadow rules are counted and reported but never refuse: for dark
	// launches.
	Shadow bool
	// QuotaMode rules (envoyproxy/ratelimit's quota_mode) refuse a request only
	// when every quota hit of the request refuses it: a request may spend
	// from whichever of several quotas still has some. A quota hit that
	// refuses alone is Refused without refusing the request.
	QuotaMode bool
	// Unit is the quota unit of the RateLimit-Policy field (qu), such as
	// "content-bytes" when the cost is the body size; empty means requests,
	// the field's default, and is not announced.
	Unit string
	// Index is the rule's position in the set its compiler built, so that a
	// door can keep per-rule data (metrics, preformatted text) in a slice;
	// the engine never reads it.
	Index int
	// Announce is the rule's text in the RateLimit fields, formatted once
	// when the configuration loads (header.Prepare). The engine never reads
	// it.
	Announce Announcement
	// Concurrency, when its Max is set, makes the rule a concurrency limit
	// instead of a rate limit: at most Max requests in flight per key, each
	// holding a lease (portero.LeaseStore) from its admission until its
	// door gives the lease back. Its hits are decided by Admit, never by
	// Decide; the embedded portero.Rule then has a Name only (no Algorithm,
	// no Limit), and Concurrency.Name is set to it.
	Concurrency portero.ConcurrencyRule
	// Service says that a refusal by the rule is the service's, not the
	// client's: HTTP doors answer 503 temporary-reduced-capacity instead of
	// 429 (Verdict.Unavailable). Compilers set it for a concurrency rule
	// whose key names no client (global, route, method, host).
	Service bool

	maxCost  int64
	compiled bool
}

// Announcement is a rule's preformatted text in the RateLimit header
// fields (draft-ietf-httpapi-ratelimit-headers-11): its name as a
// Structured Field String and its RateLimit-Policy member. Package
// engine/header fills it and reads it.
type Announcement struct {
	// Name is the rule's name as an sf-string, such as "per-ip" in quotes.
	Name string
	// Policy is the rule's RateLimit-Policy member, such as
	// "per-ip";q=100;w=60.
	Policy string
}

// ErrInvalidHit reports a hit the engine cannot decide: no rule, a rule not
// built with NewRule, or a counted hit whose cost is not positive. It is a
// compiler's bug, never the client's doing.
var ErrInvalidHit = errors.New("engine: invalid hit")

// NewRule validates r and returns the compiled rule. A limit with Count,
// Burst and Rate all zero is a rule that admits nothing (envoyproxy's
// requests_per_unit: 0, a block list entry): every counted hit on it is
// refused as one that can never pass, without asking the store. Errors wrap
// portero.ErrInvalidLimit or portero.ErrUnknownAlgorithm.
func NewRule(r Rule) (*Rule, error) {
	if r.Concurrency != (portero.ConcurrencyRule{}) {
		return newConcurrencyRule(r)
	}
	if r.admitsNothing() {
		if _, err := portero.ParseAlgorithm(string(r.Algorithm)); err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		if r.Limit.Window < 0 {
			return nil, fmt.Errorf("rule %q: %w: window %v: must not be negative", r.Name, portero.ErrInvalidLimit, r.Limit.Window)
		}
		r.maxCost, r.compiled = 0, true
		return &r, nil
	}
	if err := r.Rule.Validate(); err != nil {
		return nil, err
	}
	max, err := algorithm.MaxCost(r.Algorithm, r.Limit)
	if err != nil {
		return nil, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	r.maxCost, r.compiled = max, true
	return &r, nil
}

// ConcurrencyUnit is the quota unit of a concurrency rule in the
// RateLimit-Policy field (qu).
const ConcurrencyUnit = "concurrent-requests"

// newConcurrencyRule validates a concurrency rule: a name, a Max and a TTL
// (portero.ConcurrencyRule.Validate), and nothing of a rate limit.
func newConcurrencyRule(r Rule) (*Rule, error) {
	switch {
	case r.Algorithm != "" || r.Limit != (portero.Limit{}):
		return nil, fmt.Errorf("rule %q: %w: a concurrency limit has no algorithm and no rate limit", r.Name, portero.ErrInvalidLimit)
	case r.Concurrency.Name != "" && r.Concurrency.Name != r.Name:
		return nil, fmt.Errorf("rule %q: %w: its concurrency limit is named %q", r.Name, portero.ErrInvalidLimit, r.Concurrency.Name)
	case r.Unit != "" && r.Unit != ConcurrencyUnit:
		return nil, fmt.Errorf("rule %q: %w: a concurrency limit counts %s, not %s", r.Name, portero.ErrInvalidLimit, ConcurrencyUnit, r.Unit)
	}
	r.Concurrency.Name = r.Name
	if err := r.Concurrency.Validate(); err != nil {
		return nil, err
	}
	r.Unit = ConcurrencyUnit
	r.maxCost, r.compiled = 1, true
	return &r, nil
}

// IsConcurrency reports whether r is a concurrency limit (Rule.Concurrency).
func (r *Rule) IsConcurrency() bool { return r.Concurrency.Max != 0 }

// NewCountingRule returns r, a fixed window, compiled for CountEach alone:
// any count per window of a whole number of seconds, as
// envoyproxy/ratelimit accepts them (4294967295 per second, say, which is
// more than Portero's algorithms count: NewRule refuses it). Decided under
// AllOrNothing, such a rule is the store's error.
func NewCountingRule(r Rule) (*Rule, error) {
	if r.Algorithm != portero.FixedWindow {
		return nil, fmt.Errorf("rule %q: %w: a counting rule is a %s, not %s", r.Name, portero.ErrInvalidLimit, portero.FixedWindow, r.Algorithm)
	}
	if w := r.Limit.Window; w < time.Second || w%time.Second != 0 || r.Limit.Count < 0 || r.Limit.IsCalendar() {
		return nil, fmt.Errorf("rule %q: %w: %s: want a count per whole number of seconds", r.Name, portero.ErrInvalidLimit, r.Limit)
	}
	r.maxCost, r.compiled = r.Limit.Count, true
	return &r, nil
}

func (r *Rule) admitsNothing() bool {
	return r.Limit.Count == 0 && r.Limit.Burst == 0 && r.Limit.Rate == 0 && !r.Limit.IsCalendar()
}

// MaxCost returns the largest cost one request may have under r: the count
// for the window algorithms, the burst for the buckets, GCRA and the queue;
// 0 for a rule that admits nothing; 1 for a concurrency limit. A counted hit of a larger cost can
// never pass.
func (r *Rule) MaxCost() int64 { return r.maxCost }

// Quota returns what r announces in RateLimit-Policy, one meaning per
// algorithm: for the window algorithms (fixed, anchored, sliding log,
// sliding counter) q is the count L and w the window W; for the buckets,
// GCRA and the queue q is the burst B and w the time the rate takes to
// refill all of it, B/r (the window when that does not fit a Duration);
// for a calendar quota (a Limit with a Period) q is the count and w the
// period's nominal length (portero.Period.Nominal: 24 h, 7 or 30 days). A
// rule that admits nothing announces q = 0 over its window. A concurrency
// limit announces q = Max and no window (w = 0).
func (r *Rule) Quota() (q int64, w time.Duration) {
	if r.IsConcurrency() {
		return r.Concurrency.Max, 0
	}
	if r.admitsNothing() {
		return 0, r.Limit.Window
	}
	if r.Limit.IsCalendar() {
		return r.Limit.Count, r.Limit.Period.Nominal()
	}
	if windowed(r.Algorithm) {
		return r.Limit.Count, r.Limit.Window
	}
	c := r.Limit.Capacity()
	iv := r.Limit.Interval()
	if iv > 0 && c <= math.MaxInt64/int64(iv) {
		return c, time.Duration(c) * iv
	}
	return c, r.Limit.Window
}

func windowed(a portero.Algorithm) bool {
	switch a {
	case portero.FixedWindow, portero.FixedWindowAnchored, portero.SlidingLog, portero.SlidingCounter:
		return true
	}
	return false
}
