package engine

import (
	"math/bits"
	"time"

	"github.com/portero-rl/portero"
)

// Hit is one rule applied to one key: the engine's input, from a compiler.
type Hit struct {
	// Rule is the compiled rule; required.
	Rule *Rule
	// Key is the store key the hit is counted under.
	Key string
	// Cost is the units the request uses under Rule: at least 1 for a
	// counted hit; a check-only hit is looked at at its cost, at least 1.
	Cost int64
	// CheckOnly hits are looked at, not counted (Envoy's hits_addend 0):
	// one refuses the request when a request of its cost would not pass.
	CheckOnly bool
	// MaxDelay, when positive, is the longest a leaky-queue hit may wait
	// for its departure (portero.Hit.MaxDelay): a later one refuses the
	// request, which counts nothing. Doors that hold requests set it.
	MaxDelay time.Duration
}

// Outcome is what happened to a request under one hit; its String is the
// name metrics and logs use. The zero Outcome is none yet.
type Outcome uint8

// The outcomes, with their names.
const (
	// Allowed ("allowed"): counted and admitted.
	Allowed Outcome = iota + 1
	// NearLimit ("near-limit"): counted and admitted, with Options.NearLimit
	// (0.8 by default) or more of the limit used.
	NearLimit
	// Refused ("refused"): an enforced rule refused the request.
	Refused
	// ShadowRefused ("shadow-refused"): a shadow rule would have refused;
	// the request was not refused for it.
	ShadowRefused
	// NotCounted ("not-counted"): the hit would have admitted the request,
	// but another refused it, so nothing was counted.
	NotCounted
	// CheckOnly ("check-only"): a check-only hit that would admit one more
	// unit; nothing was counted for it.
	CheckOnly
	// CanNeverPass ("can-never-pass"): the hit's cost is more than its rule
	// can ever admit at once: a refusal with no retry time (not under a
	// shadow rule).
	CanNeverPass
)

var outcomeNames = [...]string{"", "allowed", "near-limit", "refused", "shadow-refused", "not-counted", "check-only", "can-never-pass"}

// Outcomes lists every outcome in order.
var Outcomes = []Outcome{Allowed, NearLimit, Refused, ShadowRefused, NotCounted, CheckOnly, CanNeverPass}

// String returns the outcome's name, such as "near-limit".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + string(rune('0'+o%10)) + ")"
}

// MarshalText implements encoding.TextMarshaler: the outcome's name.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Result is the verdict on one hit.
type Result struct {
	Hit
	// Decision is the rule's own decision. For a hit not counted Remaining
	// is what is available now. Under FailAllow and FailDeny its figures
	// are not the store's (Remaining and ResetAfter 0): doors must not
	// announce them.
	Decision portero.Decision
	// Outcome is what happened.
	Outcome Outcome
	// Failure is the failure policy that decided this hit because the store
	// could not; empty otherwise.
	Failure portero.FailurePolicy
	// Counter is, under CountEach, the plain counter's value once the hit
	// was added (envoyproxy/ratelimit's limitAfterIncrease); 0 otherwise.
	Counter uint64
	// LocalCache reports a hit refused by Options.OverLimitCache, neither
	// asked in the store nor counted.
	LocalCache bool
}

// Verdict is the engine's answer for one request. A door owns it and reuses
// it for request after request, so that a decision allocates nothing.
type Verdict struct {
	// Allowed reports whether the request may pass.
	Allowed bool
	// Results has one entry per hit, in the order of the hits.
	Results []Result
	// Violated lists the indexes in Results of the enforced hits that
	// refused the request, in order.
	Violated []int
	// Degraded is the store's error when the failure policy decided the
	// request (Result.Failure is set); nil otherwise.
	Degraded error
	// Look marks the verdict of Engine.Peek: nothing was decided, so the
	// doors tell every rule's state and no retry time, refused or not.
	Look bool
	// Shadowed reports a request its rules refused and Options.ShadowAll
	// admitted.
	Shadowed bool

	hits    []portero.Hit
	counts  []portero.Count // CountEach's counters
	active  []int
	held    []Held // the leases an admitted verdict holds (Admit)
	blocked bool   // a concurrency rule refused: the rate hits are only looked at
}

// Reset empties v for reuse, keeping its memory and dropping its
// references to rules and keys.
func (v *Verdict) Reset() {
	clear(v.Results)
	clear(v.hits)
	clear(v.counts)
	clear(v.held)
	v.reuse()
}

// reuse empties v as Reset does but leaves the old entries in its memory,
// which Decide overwrites: clearing them would cost a tenth of a decision.
func (v *Verdict) reuse() {
	*v = Verdict{Results: v.Results[:0], Violated: v.Violated[:0], hits: v.hits[:0], counts: v.counts[:0], active: v.active[:0], held: v.held[:0]}
}

// NeverPasses reports whether a hit that can never pass refused the
// request: doors send no retry time.
func (v *Verdict) NeverPasses() bool {
	for _, i := range v.Violated {
		if v.Results[i].Outcome == CanNeverPass {
			return true
		}
	}
	return false
}

// Unavailable reports whether the request was refused only for the
// service's sake, by FailDeny or by rules whose refusals are the service's
// (Rule.Service): HTTP doors answer 503, not 429.
func (v *Verdict) Unavailable() bool {
	if v.Allowed || len(v.Violated) == 0 {
		return false
	}
	for _, i := range v.Violated {
		if r := &v.Results[i]; r.Outcome == CanNeverPass || r.Failure != portero.FailDeny && !r.Rule.Service {
			return false
		}
	}
	return true
}

// StoreFailed reports whether the failure policy refused a hit of the
// request (FailDeny), rather than the rules themselves.
func (v *Verdict) StoreFailed() bool {
	for _, i := range v.Violated {
		if v.Results[i].Failure == portero.FailDeny {
			return true
		}
	}
	return false
}

// Decider returns the index in Results of the hit that decided the
// request, or -1: when refused, the violated hit that can never pass, else
// the one with the longest wait; when allowed, the enforced hit the store
// decided closest to exhaustion (lowest Remaining/Limit); the first among
// equals. Doors describe the request by it.
func (v *Verdict) Decider() int {
	pick := -1
	if !v.Allowed {
		for _, i := range v.Violated {
			if pick < 0 || worse(&v.Results[i], &v.Results[pick]) {
				pick = i
			}
		}
		return pick
	}
	for i := range v.Results {
		res := &v.Results[i]
		if res.Rule.Shadow || res.Failure != "" {
			continue
		}
		if pick < 0 || closer(&res.Decision, &v.Results[pick].Decision) {
			pick = i
		}
	}
	return pick
}

// worse reports whether refusal a tells more than b.
func worse(a, b *Result) bool {
	if (a.Outcome == CanNeverPass) != (b.Outcome == CanNeverPass) {
		return a.Outcome == CanNeverPass
	}
	return a.Decision.RetryAfter > b.Decision.RetryAfter
}

// closer reports whether a.Remaining/a.Limit < b.Remaining/b.Limit, in
// 128-bit products.
func closer(a, b *portero.Decision) bool {
	ah, al := bits.Mul64(uint64(max(a.Remaining, 0)), uint64(max(b.Limit, 0)))
	bh, bl := bits.Mul64(uint64(max(b.Remaining, 0)), uint64(max(a.Limit, 0)))
	return ah < bh || ah == bh && al < bl
}

// UntilReset is how long until r's count resets, as Envoy's
// duration_until_reset tells it: to the end of a calendar quota's period
// or of a fixed window (epoch-aligned, also when nothing is counted yet),
// otherwise until the limit is whole again or, refused, until it could
// pass.
func (r *Result) UntilReset(now time.Time) time.Duration {
	switch lim := r.Rule.Limit; {
	case lim.IsCalendar():
		_, end := lim.PeriodAt(now)
		return max(end.Sub(now), 0)
	case r.Rule.Algorithm == portero.FixedWindow:
		return WindowRemainder(now, lim.Window)
	}
	return max(r.Decision.ResetAfter, r.Decision.RetryAfter)
}
