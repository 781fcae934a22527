package algorithm

import (
	"fmt"
	"math"

	"github.com/portero-rl/portero"
)

// Settling a request after the fact. A rule whose cost is known only once
// the response is out (the tokens an LLM reports, the bytes sent) reserves
// an estimate when it decides and settles the difference afterwards; a
// rule that counts only the requests whose response matches (a failed
// login) looks before the request and charges after it. Both need one more
// operation on a key's state besides Decide: Adjust.
//
//   - A charge (delta > 0) adds delta units at now, unconditionally: the
//     request has already happened. The key may end up over its limit,
//     and is then refused until the excess has expired or refilled. A
//     charge never leaves more than twice the limit used (the count, or
//     the burst of a bucket): the key is refused for as long as an exact
//     count would keep it refused up to that point, and the numbers stay
//     within what every store computes exactly.
//   - A refund (delta < 0) gives back −delta units taken by the decision at
//     instant at, as if they had never been taken, when they still count:
//     in the same window or calendar period for the windows (a reservation
//     whose window has ended was released with it), in the previous or
//     current window for the sliding counter, always for the buckets and
//     GCRA, where a refund adds back what was taken but never fills the
//     bucket beyond its capacity (which is exactly the state the bucket
//     would be in had the units not been taken). A key with no state gets
//     nothing back.
//
// The queue (leaky-queue) holds places, not counts: it cannot be charged
// after the fact, but a place can be given back by a request that leaves
// before its departure (its client went away): the queue's end moves back
// by the places given back, never before now, so that the next arrival is
// held as long as the places still taken make it. The requests already
// waiting keep their departures, so an arrival may depart at the same
// instant as one of them: counted from any instant the queue was empty,
// departures never outrun the rate, but a given-back place in the middle
// of the queue can bunch two departures together. A place taken by a
// decision at least B·T ago has departed: it gets nothing back.
//
// The sliding log keeps the instant of every unit: it cannot be refunded
// (portero.ErrNotAdjustable). It can be charged: it logs the units at
// now and, beyond its limit, drops its oldest entries, which changes no
// decision (a log over its limit admits nothing until the entries above
// the limit have expired, and the oldest expire first).

// Adjuster is implemented by the Deciders whose state can be adjusted:
// every fixed-size algorithm.
type Adjuster interface {
	// Adjust returns s after the adjustment of delta units at now (see
	// above; at is the instant of the decision a refund gives back), and
	// whether the state changed (false: keep s as it was, or store none
	// for a key without state). delta is not 0.
	Adjust(s State, found bool, now, at, delta int64) (State, bool)
}

// CanAdjust reports whether rules of algorithm alg can be charged, and
// refunded, after the fact.
func CanAdjust(alg portero.Algorithm) (charge, refund bool) {
	switch alg {
	case portero.LeakyQueue:
		return false, true
	case portero.SlidingLog:
		return true, false
	}
	return true, true
}

// CheckAdjust reports an adjustment of delta units that rule's algorithm
// cannot make, wrapping portero.ErrNotAdjustable: the check every store
// makes before it changes anything.
func CheckAdjust(rule portero.Rule, delta int64) error {
	charge, refund := CanAdjust(rule.Algorithm)
	if delta > 0 && !charge || delta < 0 && !refund {
		what := "charged"
		if delta < 0 {
			what = "refunded"
		}
		return fmt.Errorf("rule %q: %s cannot be %s: %w", rule.Name, rule.Algorithm, what, portero.ErrNotAdjustable)
	}
	return nil
}

// most is what charges may leave used of a window's limit: twice the limit
// (the limit itself for limits too large to double).
func most(limit int64) int64 {
	if limit > math.MaxInt64/4 {
		return limit
	}
	return 2 * limit
}

// bucketMost is the same for a bucket of capacity c refilled one unit per
// t ns: 2c, or c when 2c·t could overflow.
func bucketMost(c, t int64) int64 {
	if c > math.MaxInt64/4/t {
		return c
	}
	return 2 * c
}

// clampCharge bounds a charge of delta units on a state that has used
// used units, so that at most most units are used after it.
func clampCharge(used, delta, most int64) int64 {
	room := most - used
	if room <= 0 {
		return 0
	}
	return min(delta, room)
}

// addCount applies delta to a window's count: a charge up to most(limit),
// a refund down to zero.
func addCount(c, delta, limit int64) int64 {
	if delta > 0 {
		return c + clampCharge(c, delta, most(limit))
	}
	return max(0, c+max(delta, -c))
}

// Adjust implements Adjuster.
func (a *FixedWindow) Adjust(s State, found bool, now, at, delta int64) (State, bool) {
	k := floorDiv(now, a.window)
	if delta > 0 {
		if !found || k > s.A {
			s = State{A: k}
		}
		s.B = addCount(s.B, delta, a.count)
		return s, true
	}
	if !found || floorDiv(at, a.window) != s.A {
		return s, false
	}
	s.B = addCount(s.B, delta, a.count)
	return s, true
}

// Adjust implements Adjuster.
func (a *AnchoredWindow) Adjust(s State, found bool, now, at, delta int64) (State, bool) {
	live := found && now < s.A+a.window
	if delta > 0 {
		if !live {
			s = State{A: now}
		}
		s.B = addCount(s.B, delta, a.count)
		return s, true
	}
	if !live || at < s.A {
		return s, false
	}
	s.B = addCount(s.B, delta, a.count)
	return s, true
}

// Adjust implements Adjuster.
func (a *CalendarWindow) Adjust(s State, found bool, now, at, delta int64) (State, bool) {
	if delta > 0 {
		if _, end := a.Period(now); !found || end > s.A {
			s = State{A: end}
		}
		s.B = addCount(s.B, delta, a.count)
		return s, true
	}
	if !found {
		return s, false
	}
	if _, end := a.Period(at); end != s.A {
		return s, false
	}
	s.B = addCount(s.B, delta, a.count)
	return s, true
}

// Adjust implements Adjuster. A charge counts in the current window; a
// refund takes from the window the reservation was counted in while it is
// the current or the previous one.
func (a *SlidingCounter) Adjust(s State, found bool, now, at, delta int64) (State, bool) {
	if delta > 0 {
		c, _ := a.at(s, found, now)
		// The 32-bit halves of the state cap what is used.
		c.cur += clampCharge(c.cur, delta, min(most(a.count), math.MaxUint32))
		return State{A: c.k, B: c.prev<<32 | c.cur}, true
	}
	if !found {
		return s, false
	}
	c, _ := a.at(s, true, now)
	switch floorDiv(at, a.window) {
	case c.k:
		c.cur = addCount(c.cur, delta, a.count)
	case c.k - 1:
		c.prev = addCount(c.prev, delta, a.count)
	default:
		return s, false
	}
	return State{A: c.k, B: c.prev<<32 | c.cur}, true
}

// Adjust implements Adjuster: a charge takes delta·T of credit (down to
// minus the capacity: a debt the refill pays first), a refund gives it
// back up to the capacity.
func (a *TokenBucket) Adjust(s State, found bool, now, at, delta int64) (State, bool) {
	if !found {
		if delta < 0 {
			return s, false
		}
		s = State{A: a.tau, B: now}
	}
	credit, last := s.A, s.B
	if e := elapsedSince(now, last); e >= a.tau-credit {
		credit = a.tau
	} else {
		credit += e
	}
	last = max(last, now)
	m := bucketMost(a.capacity, a.interval)
	if delta > 0 {
		used := (a.tau - credit) / a.interval
		credit -= clampCharge(used, delta, m) * a.interval
	} else if back := min(-delta, m) * a.interval; back >= a.tau-credit {
		credit = a.tau
	} else {
		credit += back
	}
	return State{A: credit, B: last}, true
}

// Adjust implements Adjuster: the meter's level rises by a charge (up to
// twice the capacity) and falls by a refund (down to empty).
func (a *LeakyMeter) Adjust(s State, found bool, now, at, delta int64) (State, bool) {
	if !found {
		if delta < 0 {
			return s, false
		}
		s = State{A: 0, B: now}
	}
	level, last := s.A, s.B
	if e := elapsedSince(now, last); e >= level {
		level = 0
	} else {
		level -= e
	}
	last = max(last, now)
	m := bucketMost(a.capacity, a.interval)
	if delta > 0 {
		used := (level + a.interval - 1) / a.interval
		level += clampCharge(used, delta, m) * a.interval
	} else if back := min(-delta, m) * a.interval; back >= level {
		level = 0
	} else {
		level -= back
	}
	return State{A: level, B: last}, true
}

// Adjust implements Adjuster: a charge moves the theoretical arrival time
// on (up to twice the capacity ahead of now), a refund moves it back (never
// before now).
func (a *GCRA) Adjust(s State, found bool, now, at, delta int64) (State, bool) {
	tat := now
	if found && s.A > now {
		tat = s.A
	}
	m := bucketMost(a.capacity, a.interval)
	if delta > 0 {
		used := (tat - now + a.interval - 1) / a.interval
		return State{A: tat + clampCharge(used, delta, m)*a.interval}, true
	}
	if tat == now {
		return s, false
	}
	if back := min(-delta, m) * a.interval; back < tat-now {
		return State{A: tat - back}, true
	}
	return State{A: now}, true
}

// Adjust implements Adjuster for a refund (a charge is refused by
// CheckAdjust): the last departure moves back by the places given back,
// never before now.
func (a *LeakyQueue) Adjust(s State, found bool, now, at, delta int64) (State, bool) {
	if delta > 0 || !found || s.A <= now || now-at >= a.tau {
		return s, false // nothing waits, or the place has departed
	}
	return State{A: max(s.A-min(-delta, a.capacity)*a.interval, now)}, true
}

// Charge logs delta units at now (delta > 0), unconditionally, keeping at
// most L entries: beyond them the oldest are dropped, which changes no
// decision (see the package's notes on settling).
func (a *SlidingLog) Charge(l *Log, now, delta int64) {
	a.Decide(l, now, 1) // prune, and hold the clock as a decision does
	delta = min(delta, a.count)
	for int64(l.n)+delta > a.count {
		l.head = (l.head + 1) % len(l.ring)
		l.n--
	}
	a.Record(l, now, delta)
}

// AdjustState applies one adjustment to a fixed-size state with d, which
// must be an Adjuster: the helper every store calls. Errors wrap
// portero.ErrNotAdjustable.
func AdjustState(d Decider, s State, found bool, now, at, delta int64) (State, bool, error) {
	adj, ok := d.(Adjuster)
	if !ok {
		return s, false, fmt.Errorf("%w: %T keeps no fixed-size state", portero.ErrNotAdjustable, d)
	}
	if delta == 0 {
		return s, false, nil
	}
	st, changed := adj.Adjust(s, found, now, at, delta)
	return st, changed, nil
}
