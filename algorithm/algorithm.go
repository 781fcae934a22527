// Package algorithm holds Portero's counting algorithms as pure functions of
// (state, now, cost). They know nothing about keys, locks, stores or the wall
// clock: a store looks up a key's state, asks a Decider for the decision and
// the next state, and writes that state back only if it commits the
// decision. That split is what lets a store apply several rules
// all-or-nothing, and lets the Redis scripts be checked against these
// functions decision for decision.
//
// Time is an int64 count of nanoseconds since the Unix epoch
// (time.Time.UnixNano). The buckets, GCRA and the queue count in whole
// nanoseconds of the rate's interval T = 1/r (portero.Limit.Interval), so
// the token bucket, the leaky bucket as a meter and GCRA admit exactly the
// same requests: tokens = credit/T, level = B·T − credit, and the GCRA's
// theoretical arrival time is now + level.
//
// When time goes backwards (a clock step, or two callers whose clocks
// disagree) no algorithm creates capacity out of it: the buckets, the
// windows and the log treat an instant earlier than the last one they saw as
// that last instant; GCRA and the queue, which keep only a future timestamp,
// become stricter by the size of the step until real time catches up.
// RetryAfter and ResetAfter are always measured from the caller's now, so
// they include the step.
package algorithm

import (
	"fmt"
	"math"
	"time"

	"github.com/portero-rl/portero"
)

// State is the fixed-size state of one key: two 64-bit words whose meaning
// each Decider documents. A store keeps it opaque.
type State struct{ A, B int64 }

// A Decider is one algorithm configured with one limit. It is immutable and
// safe for concurrent use; the state it is given belongs to the caller.
type Decider interface {
	// Decide returns the decision for a request of the given cost at now
	// (Unix ns), given the key's state s (found is false when the key has no
	// state), and the state to keep if the decision is committed. A store
	// keeps s unchanged after a refusal: the returned state is then s brought
	// up to date, which decides the same while time goes forward but would
	// forget an earlier instant if the clock later stepped back. The cost
	// must have passed CheckCost, or be 0: a request of cost 0 takes
	// nothing, and its Remaining and ResetAfter are what stands at now
	// (Look).
	Decide(s State, found bool, now, cost int64) (State, portero.Decision)
	// Expiry returns the instant (Unix ns) from which s is equivalent to no
	// state at all, so that a store may drop it (and a TTL may end).
	Expiry(s State) int64
	// MaxCost is the largest cost a single request may have.
	MaxCost() int64
	// Limit returns the limit the Decider enforces.
	Limit() portero.Limit
}

// A WordDecider is a Decider whose state is one word: State.B is always
// zero (GCRA and the leaky queue). A store may keep that word alone and
// update it with one compare-and-swap instead of a lock, since the word is
// the whole state.
type WordDecider interface {
	Decider
	// DecideWord is Decide for the state State{A: a}: it returns the new
	// word and the decision. A refusal returns a unchanged.
	DecideWord(a int64, found bool, now, cost int64) (int64, portero.Decision)
}

// CheckCost reports whether cost is acceptable for a rule whose largest
// admissible cost is maxCost: errors wrap portero.ErrInvalidCost or
// portero.ErrCostExceedsLimit.
func CheckCost(cost, maxCost int64) error {
	if cost <= 0 {
		return fmt.Errorf("%w: %d: must be at least 1", portero.ErrInvalidCost, cost)
	}
	if cost > maxCost {
		return fmt.Errorf("%w: cost %d is more than the %d the rule can ever admit at once", portero.ErrCostExceedsLimit, cost, maxCost)
	}
	return nil
}

// New returns the Decider for a fixed-size algorithm: for FixedWindow with
// a calendar limit (portero.Limit.Period), a CalendarWindow; a calendar limit
// under any other algorithm is an error. SlidingLog keeps a
// variable amount of state and has its own type (NewSlidingLog); asking New
// for it is an error.
func New(alg portero.Algorithm, l portero.Limit) (Decider, error) {
	if err := l.ValidateFor(alg); err != nil {
		return nil, err
	}
	switch alg {
	case portero.FixedWindow:
		if l.IsCalendar() {
			return newCalendarWindow(l), nil
		}
		return newFixedWindow(l), nil
	case portero.FixedWindowAnchored:
		return newAnchoredWindow(l), nil
	case portero.SlidingCounter:
		if l.Count > math.MaxUint32 {
			return nil, fmt.Errorf("%w: sliding-counter count %d: at most %d", portero.ErrInvalidLimit, l.Count, uint32(math.MaxUint32))
		}
		return newSlidingCounter(l), nil
	case portero.TokenBucket:
		return newTokenBucket(l), nil
	case portero.LeakyMeter:
		return newLeakyMeter(l), nil
	case portero.GCRA:
		return newGCRA(l), nil
	case portero.LeakyQueue:
		return newLeakyQueue(l), nil
	case portero.SlidingLog:
		return nil, fmt.Errorf("%w: sliding-log keeps one entry per admitted request; use NewSlidingLog", portero.ErrUnknownAlgorithm)
	}
	return nil, fmt.Errorf("%w %q", portero.ErrUnknownAlgorithm, string(alg))
}

// MaxCost returns the largest cost one request can have under alg with
// limit l (the count for the window algorithms, the capacity for the
// buckets, GCRA and the queue), for every algorithm, the sliding log
// included; an invalid limit or algorithm is an error.
func MaxCost(alg portero.Algorithm, l portero.Limit) (int64, error) {
	if alg == portero.SlidingLog {
		lg, err := NewSlidingLog(l)
		if err != nil {
			return 0, err
		}
		return lg.MaxCost(), nil
	}
	d, err := New(alg, l)
	if err != nil {
		return 0, err
	}
	return d.MaxCost(), nil
}

// floorDiv returns ⌊a/b⌋ for b > 0, also for negative a.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// elapsedSince returns now−last, or 0 when time went backwards, saturating
// instead of overflowing.
func elapsedSince(now, last int64) int64 {
	if now <= last {
		return 0
	}
	d := now - last
	if d < 0 { // overflow
		return math.MaxInt64
	}
	return d
}

func dur(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}
