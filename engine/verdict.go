package engine

import (
	"math/bits"
	"time"

	"github.com/portero-rl/portero"
)

// Hit is one rule applied to one key: the engine's input, produced by a
// compiler.
type Hit struct {
	// Rule is the compiled rule; required.
	Rule *Rule
	// Key is the store key the hit is counted under.
	Key string
	// Cost is the number of units the request uses under Rule; at least 1
	// for a counted hit. A check-only hit is looked at at its cost, at
	// least 1 (Envoy's hits_addend 0 asks about one more unit).
	Cost int64
	// CheckOnly hits are looked at, not counted: the hit refuses the
	// request when a request of its cost would not pass (as Envoy's
	// descriptor hits_addend 0 asks, for one unit).
	CheckOnly bool
	// MaxDelay, when positive, is the longest a leaky-queue hit may wait
	// for its departure (portero.Hit.MaxDelay): a later one refuses the
	// request, and nothing of it is counted. Doors that hold requests set
	// it from their shape and the request's deadline.
	MaxDelay time.Duration
}

// Outcome is what happened to a request under one hit. Its String (and
// text form) is the name metrics and logs use; the zero Outcome is none
// yet ("").
type Outcome uint8

// The outcomes. Metrics and logs use their names.
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
	// but another hit refused it, so (all-or-nothing) nothing was counted.
	NotCounted
	// CheckOnly ("check-only"): a check-only hit that would admit one more
	// unit; nothing was counted for it.
	CheckOnly
	// CanNeverPass ("can-never-pass"): the hit's cost is more than its rule
	// can ever admit at once (or the rule admits nothing). Retrying never
	// helps, so the refusal carries no retry time. Under a shadow rule it
	// does not refuse.
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
	// Decision is the rule's own decision, with its own limit, remaining,
	// retry and reset times. For a hit that was not counted (NotCounted,
	// CheckOnly) Remaining is what is available now, since nothing was
	// taken. When Failure is FailAllow or FailDeny, Remaining, RetryAfter
	// and ResetAfter are not the store's (Remaining and ResetAfter are 0,
	// RetryAfter is Options.RetryAfterOnFailure for a refusal): doors must
	// not announce them. For a CanNeverPass hit RetryAfter is 0.
	Decision portero.Decision
	// Outcome is what happened.
	Outcome Outcome
	// Failure is the failure policy that decided this hit because the store
	// could not; empty when the store (or, for CanNeverPass, the engine
	// alone) decided.
	Failure portero.FailurePolicy
	// Counter is, for a hit counted under CountEach on a plain counter,
	// the counter's value once the hit was added (envoyproxy/ratelimit's
	// limitAfterIncrease, from which its statistics split the hit into
	// within, near and over the limit); 0 otherwise.
	Counter uint64
}

// Verdict is the engine's answer for one request. A door owns it and may
// reuse it for request after request (Reset keeps its memory), so that a
// decision allocates nothing of its own.
type Verdict struct {
	// Allowed reports whether the request may pass.
	Allowed bool
	// Results has one entry per hit, in the order of the hits.
	Results []Result
	// Violated lists the indexes in Results of the enforced hits that
	// refused the request (Refused or CanNeverPass), in order; empty when
	// Allowed.
	Violated []int
	// Degraded is the store's error when the failure policy decided the
	// request (Result.Failure is set); nil otherwise.
	Degraded error
	// Look marks the verdict of Engine.Peek: nothing was decided, so the
	// doors tell every rule's state and no retry time, refused or not.
	Look bool

	// Scratch space kept between decisions.
	hits   []portero.Hit
	counts []portero.Count // CountEach's counters
	active []int
	held   []Held // the leases an admitted verdict holds (Admit)
	// blocked: a concurrency rule refused, so the rate hits are only
	// looked at.
	blocked bool
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

// reuse empties v as Reset does but leaves the old entries in its memory:
// Decide overwrites each one it uses, and clearing them first cost a tenth
// of a memory-store decision (write barriers while the collector runs).
// What a larger earlier request left beyond the new length stays
// referenced until it is overwritten or v is dropped or Reset.
func (v *Verdict) reuse() {
	*v = Verdict{Results: v.Results[:0], Violated: v.Violated[:0], hits: v.hits[:0], counts: v.counts[:0], active: v.active[:0], held: v.held[:0]}
}

// NeverPasses reports whether the request was refused by a hit that can
// never pass: retrying the same request is pointless, so doors send no
// retry time.
func (v *Verdict) NeverPasses() bool {
	for _, i := range v.Violated {
		if v.Results[i].Outcome == CanNeverPass {
			return true
		}
	}
	return false
}

// Unavailable reports whether the request was refused only for the
// service's sake: because the store failed and the failure policy is
// FailDeny, or by rules whose refusals are the service's (Rule.Service, a
// service-wide concurrency limit). It is the service's fault, not the
// client's: HTTP doors answer 503, not 429.
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

// StoreFailed reports whether the failure policy refused at least one hit
// of the request (the store failed under FailDeny), as against a refusal
// by the rules themselves: doors say which in their answer.
func (v *Verdict) StoreFailed() bool {
	for _, i := range v.Violated {
		if v.Results[i].Failure == portero.FailDeny {
			return true
		}
	}
	return false
}

// Decider returns the index in Results of the hit that decided the
// request, or -1: when refused, the violated hit that can never pass or
// else the one with the longest wait (the first among equals); when
// allowed, the enforced hit the store decided that is closest to
// exhaustion (the lowest Remaining/Limit, the first among equals). Doors
// describe the request by it (the check API's summary, the legacy
// X-RateLimit fields).
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

// worse reports whether refusal a tells more than b: can-never-pass first,
// then the longer wait.
func worse(a, b *Result) bool {
	if (a.Outcome == CanNeverPass) != (b.Outcome == CanNeverPass) {
		return a.Outcome == CanNeverPass
	}
	return a.Decision.RetryAfter > b.Decision.RetryAfter
}

// closer reports whether a is closer to exhaustion than b:
// a.Remaining/a.Limit < b.Remaining/b.Limit, without division and without
// overflow (the products are 128 bits).
func closer(a, b *portero.Decision) bool {
	ah, al := bits.Mul64(uint64(max(a.Remaining, 0)), uint64(max(b.Limit, 0)))
	bh, bl := bits.Mul64(uint64(max(b.Remaining, 0)), uint64(max(a.Limit, 0)))
	return ah < bh || ah == bh && al < bl
}
