package overload

import (
	"fmt"
	"time"
)

// Shape says how a queue rule (leaky-queue) holds the requests it admits,
// as nginx's limit_req does with burst and delay=N. The queue's size (the
// rule's burst) bounds how many may wait; the first Delay places of the
// queue pass at once; every later place is held until its departure less
// Delay intervals, so that what passes beyond the first Delay is spaced out
// at the rule's rate. A request whose hold would exceed its bound —
// MaxDelay, or its deadline — is refused at once, not after waiting. The
// zero value holds every request until its departure: pure shaping.
//
// In Portero's queue even the first place departs one interval after it
// was taken (docs/algorithms.md), whereas nginx lets a request into an
// empty bucket pass at once and counts only the excess: nginx's burst=B
// delay=N reads here as a burst (queue size) of B+1 and Delay N+1.
type Shape struct {
	// Delay is how many places, in cost units, at the head of the queue
	// pass without waiting. Zero or more.
	Delay int64
	// MaxDelay, when not zero, is the longest a request is held; zero
	// means the queue's size and the request's deadline bound it.
	MaxDelay time.Duration
}

// Validate reports a Shape with a negative field.
func (s Shape) Validate() error {
	if s.Delay < 0 {
		return fmt.Errorf("shape: delay %d: want zero or more places", s.Delay)
	}
	if s.MaxDelay < 0 {
		return fmt.Errorf("shape: max delay %v: want zero (none) or more", s.MaxDelay)
	}
	return nil
}

// Hold returns how long to hold a request that a queue rule with the given
// interval (the time between departures: window / count) admitted with
// departure delay: delay less Delay intervals, never negative.
func (s Shape) Hold(delay, interval time.Duration) time.Duration {
	return max(0, delay-time.Duration(s.Delay)*interval)
}

// Bound returns how long a request may be held at most: MaxDelay or
// left, the time until its deadline, whichever is shorter; ok is false
// when it has neither.
func (s Shape) Bound(left time.Duration, hasDeadline bool) (bound time.Duration, ok bool) {
	switch {
	case s.MaxDelay > 0 && hasDeadline:
		return min(s.MaxDelay, left), true
	case s.MaxDelay > 0:
		return s.MaxDelay, true
	}
	return left, hasDeadline
}
