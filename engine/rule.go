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
// portero.Rule), whether it may refuse, and how doors announce it. A
// compiler builds one per rule with NewRule; it is then immutable.
type Rule struct {
	portero.Rule
	// Shadow rules are counted and reported but never refuse.
	Shadow bool
	// QuotaMode rules (envoyproxy/ratelimit's quota_mode) refuse a request
	// only when all its quota hits refuse: it may spend from whichever
	// quota has some left.
	QuotaMode bool
	// Unit is the RateLimit-Policy quota unit (qu), such as content-bytes;
	// empty means requests.
	Unit string
	// Index is the rule's position in its compiler's set, for doors' per-rule
	// slices; the engine never reads it.
	Index int
	// Announce is the rule's text in the RateLimit fields (header.Announce);
	// the engine never reads it.
	Announce Announcement
	// Concurrency, when its Max is set, makes the rule a concurrency limit:
	// at most Max requests in flight per key, each holding a lease until
	// its door gives it back. Admit decides its hits; the embedded
	// portero.Rule has a Name only.
	Concurrency portero.ConcurrencyRule
	// Service says that the rule's refusals are the service's, not the
	// client's (Verdict.Unavailable: 503): a concurrency rule whose key
	// names no client.
	Service bool

	maxCost  int64
	compiled bool
}

// Announcement is a rule's text in the RateLimit fields, written by
// engine/header: its Name as an sf-string ("per-ip", quoted) and its
// RateLimit-Policy member ("per-ip";q=100;w=60).
type Announcement struct {
	Name, Policy string
}

// ErrInvalidHit reports a hit the engine cannot decide (no rule, a rule not
// built with NewRule, a counted hit of no cost): a compiler's bug.
var ErrInvalidHit = errors.New("engine: invalid hit")

// NewRule validates r and returns the compiled rule. A limit of zero
// (envoyproxy's requests_per_unit: 0) admits nothing: its hits can never
// pass, and the store is not asked. Errors wrap portero.ErrInvalidLimit or
// portero.ErrUnknownAlgorithm.
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
// any count per whole number of seconds, as envoyproxy/ratelimit accepts
// (4294967295 per second, which NewRule refuses).
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
// for the windows, the burst for the buckets, GCRA and the queue, 0 for a
// rule that admits nothing, 1 for a concurrency limit.
func (r *Rule) MaxCost() int64 { return r.maxCost }

// Quota returns what r announces in RateLimit-Policy: for the windows the
// count and the window; for the buckets, GCRA and the queue the burst B and
// B/r; for a calendar quota the count and the period's nominal length; for
// a rule that admits nothing 0 over its window; for a concurrency limit Max
// and no window.
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
