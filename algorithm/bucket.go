package algorithm

import (
	"time"

	"github.com/portero-rl/portero"
)

// bucket holds what the token bucket, the leaky meter, GCRA and the queue
// share: capacity B, interval T = 1/r in ns, and tau = B·T, the capacity in
// nanoseconds of refill.
type bucket struct {
	limit    portero.Limit
	capacity int64
	interval int64
	tau      int64
}

func newBucket(l portero.Limit) bucket {
	t := int64(l.Interval())
	return bucket{limit: l, capacity: l.Capacity(), interval: t, tau: l.Capacity() * t}
}

// quo returns x/T for 0 ≤ x (Go's division; 0 or less for a negative x).
func (b *bucket) quo(x int64) int64 { return x / b.interval }

// MaxCost implements Decider: the capacity B.
func (b *bucket) MaxCost() int64 { return b.capacity }

// Limit implements Decider.
func (b *bucket) Limit() portero.Limit { return b.limit }

// TokenBucket refills lazily: tokens = min(B, tokens + elapsed·r); a new key
// starts full; fractional tokens count; a request of cost c is admitted when
// tokens ≥ c (no partial payment) and then pays c; RetryAfter is
// (c − tokens)/r. Tokens are kept as credit = tokens·T in ns, so the
// arithmetic is exact. State: A = credit, B = instant of the last update.
type TokenBucket struct{ bucket }

func newTokenBucket(l portero.Limit) *TokenBucket { return &TokenBucket{newBucket(l)} }

// Decide implements Decider.
func (a *TokenBucket) Decide(s State, found bool, now, cost int64) (State, portero.Decision) {
	credit, last := a.tau, now
	if found {
		credit, last = s.A, s.B
		// Refill; a clock that went back refills nothing and moves nothing.
		if e := elapsedSince(now, last); e >= a.tau-credit {
			credit = a.tau
		} else {
			credit += e
		}
		if now > last {
			last = now
		}
	}
	need := cost * a.interval
	lag := last - now // > 0 when the caller's clock is behind the bucket's
	d := portero.Decision{Limit: a.capacity}
	if credit >= need {
		credit -= need
		d.Allowed = true
	} else {
		d.RetryAfter = dur(need - credit + lag)
	}
	d.Remaining = max(0, credit/a.interval) // a settled charge can leave a debt
	d.ResetAfter = dur(a.tau - credit + lag)
	return State{A: credit, B: last}, d
}

// Expiry implements Decider: the instant the bucket is full again.
func (a *TokenBucket) Expiry(s State) int64 { return s.B + (a.tau - s.A) }

// LeakyMeter is the leaky bucket read as a meter: a level that drains at r;
// a request of cost c is admitted when level + c ≤ B and then adds c. It is
// the token bucket's mirror image (tokens = B − level) and admits exactly the
// same requests. The level is kept in ns of drain (level·T). State: A =
// level, B = instant of the last update.
type LeakyMeter struct{ bucket }

func newLeakyMeter(l portero.Limit) *LeakyMeter { return &LeakyMeter{newBucket(l)} }

// Decide implements Decider.
func (a *LeakyMeter) Decide(s State, found bool, now, cost int64) (State, portero.Decision) {
	level, last := int64(0), now
	if found {
		level, last = s.A, s.B
		if e := elapsedSince(now, last); e >= level {
			level = 0
		} else {
			level -= e
		}
		if now > last {
			last = now
		}
	}
	need := cost * a.interval
	lag := last - now // > 0 when the caller's clock is behind the meter's
	d := portero.Decision{Limit: a.capacity}
	if level <= a.tau-need {
		level += need
		d.Allowed = true
	} else {
		d.RetryAfter = dur(level - (a.tau - need) + lag)
	}
	d.Remaining = max(0, (a.tau-level)/a.interval) // a settled charge can overfill
	d.ResetAfter = dur(level + lag)
	return State{A: level, B: last}, d
}

// Expiry implements Decider: the instant the meter has drained.
func (a *LeakyMeter) Expiry(s State) int64 { return s.B + s.A }

// GCRA, the generic cell rate algorithm, keeps one timestamp: the
// theoretical arrival time (TAT) at which the bucket would be full again. A
// request of cost c is admitted when max(TAT, now) + c·T − now ≤ B·T, and
// then TAT = max(TAT, now) + c·T. It makes the token bucket's decisions with
// half the state, which is why it suits Redis. State: A = TAT.
type GCRA struct{ bucket }

func newGCRA(l portero.Limit) *GCRA { return &GCRA{newBucket(l)} }

// Decide implements Decider.
func (a *GCRA) Decide(s State, found bool, now, cost int64) (State, portero.Decision) {
	tat, d := a.DecideWord(s.A, found, now, cost)
	return State{A: tat}, d
}

// DecideWord implements WordDecider: the state is the TAT. It is Next and
// SetDecision, both small enough for the compiler to inline.
func (a *GCRA) DecideWord(tat int64, found bool, now, cost int64) (next int64, d portero.Decision) {
	next, retry := a.Next(tat, found, now, cost)
	a.SetDecision(&d, next-now, retry)
	return
}

// Next is DecideWord without the Decision: it returns the new TAT and how
// long the request would have to wait to fit, in ns, 0 exactly when it is
// admitted (a refusal returns max(tat, now), which is tat unless the TAT
// had passed). A store that keeps the TAT in a word it swaps uses it to
// decide with scalars only and then writes the Decision once, with
// SetDecision.
func (a *GCRA) Next(tat int64, found bool, now, cost int64) (next, retry int64) {
	if !found || tat < now {
		tat = now
	}
	// The level tat − now, and the highest level at which a request of
	// this cost fits: comparing them never forms tat + need, which could
	// overflow near the end of time.
	need := cost * a.interval
	level, room := tat-now, a.tau-need
	retry = max(0, level-room) // 0 exactly when it fits
	if retry == 0 {
		level += need
	}
	return now + level, retry
}

// SetDecision writes into d the decision whose Next left the level
// next − now and the wait retry, one field at a time. A Decision is too
// large for the compiler to keep in registers: a composite literal is built
// in a temporary and copied, 16 bytes at a time, over the field stores just
// made, which the CPU cannot forward and waits for, while fields written
// into a caller's named result are returned from where they were stored.
func (a *GCRA) SetDecision(d *portero.Decision, level, retry int64) {
	// Less than one interval of room (every refusal of cost 1, and after a
	// clock step back a level above the bucket) leaves nothing: no
	// division, the slowest instruction of the decision.
	var remaining int64
	if r := a.tau - level; r >= a.interval {
		remaining = int64(uint64(r) / uint64(a.interval))
	}
	d.Allowed = retry == 0
	d.Limit = a.capacity
	d.Remaining = remaining
	d.RetryAfter = time.Duration(retry)
	d.ResetAfter = time.Duration(level)
	d.Delay, d.Quota, d.PeriodLeft = 0, false, 0
}

// Expiry implements Decider: the TAT.
func (a *GCRA) Expiry(s State) int64 { return s.A }

// LeakyQueue is the leaky bucket read as a queue (a shaper): a FIFO of B
// places drained one request per interval T = 1/r. The first departure is one
// interval after an arrival at an empty queue, so a request with k−1 ahead
// of it departs k·T after arriving. A request of cost c takes c places and c
// intervals; when the queue cannot hold it, it is dropped. An admitted
// request has Allowed true and Delay until its departure. State: A =
// departure time of the last queued request.
type LeakyQueue struct{ bucket }

func newLeakyQueue(l portero.Limit) *LeakyQueue { return &LeakyQueue{newBucket(l)} }

// Decide implements Decider.
func (a *LeakyQueue) Decide(s State, found bool, now, cost int64) (State, portero.Decision) {
	last, d := a.DecideWord(s.A, found, now, cost)
	return State{A: last}, d
}

// DecideWord implements WordDecider: the state is the last departure.
func (a *LeakyQueue) DecideWord(last int64, found bool, now, cost int64) (int64, portero.Decision) {
	return a.DecideWithin(last, found, now, cost, 0)
}

// DecideWithin is DecideWord with a bound on the wait: a request whose
// departure would come more than maxDelay ns after now is refused, as one
// the queue cannot hold, RetryAfter being the wait after which it would
// depart within maxDelay. A maxDelay of 0 or less is no bound.
func (a *LeakyQueue) DecideWithin(last int64, found bool, now, cost, maxDelay int64) (int64, portero.Decision) {
	if !found || last < now {
		last = now
	}
	// Places taken: requests whose departure is still ahead of now; one that
	// departs exactly now has left.
	taken := a.quo(last - now + a.interval - 1)
	d := portero.Decision{Limit: a.capacity}
	// Wait until only capacity−cost places are taken:
	// last − (now+δ) ≤ (capacity−cost)·T; and, bounded, until the
	// departure last + cost·T is within maxDelay.
	wait := last - now - (a.capacity-cost)*a.interval
	if maxDelay > 0 {
		wait = max(wait, last+cost*a.interval-now-maxDelay)
	}
	if wait <= 0 {
		last += cost * a.interval
		taken += cost
		d.Allowed = true
		d.Delay = time.Duration(last - now)
	} else {
		d.RetryAfter = dur(wait)
	}
	d.Remaining = max(0, a.capacity-taken)   // taken can exceed it after a clock step back
	d.ResetAfter = time.Duration(last - now) // ≥ 0: last ≥ now
	return last, d
}

// DecideWithin is d.Decide with portero.Hit.MaxDelay: the leaky queue
// refuses a request whose departure would come more than maxDelay after
// now (LeakyQueue.DecideWithin); every other algorithm ignores the bound.
func DecideWithin(d Decider, s State, found bool, now, cost int64, maxDelay time.Duration) (State, portero.Decision) {
	if q, ok := d.(*LeakyQueue); ok && maxDelay > 0 {
		last, dec := q.DecideWithin(s.A, found, now, cost, int64(maxDelay))
		return State{A: last}, dec
	}
	return d.Decide(s, found, now, cost)
}

// Expiry implements Decider: the last departure.
func (a *LeakyQueue) Expiry(s State) int64 { return s.A }

var (
	_ WordDecider = (*GCRA)(nil)
	_ WordDecider = (*LeakyQueue)(nil)
)
