package algorithm

import (
	"math"

	"github.com/portero-rl/portero"
)

// windowed holds what the window algorithms and the sliding log share: L
// and W (in ns).
type windowed struct {
	limit  portero.Limit
	count  int64
	window int64
}

func newWindowed(l portero.Limit) windowed {
	return windowed{limit: l, count: l.Count, window: int64(l.Window)}
}

// MaxCost returns L (Decider.MaxCost of the windows).
func (a *windowed) MaxCost() int64 { return a.count }

// Limit returns the limit (Decider.Limit of the windows).
func (a *windowed) Limit() portero.Limit { return a.limit }

// FixedWindow counts in clock-aligned windows: window k is [kW, (k+1)W), so
// an instant exactly at kW belongs to the window that starts there. It admits
// while count + cost ≤ L, then counts. State: A = k, B = count admitted in
// window k.
type FixedWindow struct{ windowed }

func newFixedWindow(l portero.Limit) *FixedWindow {
	return &FixedWindow{newWindowed(l)}
}

// Decide implements Decider.
func (a *FixedWindow) Decide(s State, found bool, now, cost int64) (State, portero.Decision) {
	k := floorDiv(now, a.window)
	if !found || k > s.A {
		s = State{A: k}
	}
	// A clock that went back into an earlier window stays in the last one.
	return countIn(s, (s.A+1)*a.window, a.count, now, cost)
}

// countIn is the rule both fixed windows share once they know the window
// (its count in s.B, its end): admit while count + cost ≤ L, then count.
func countIn(s State, end, limit, now, cost int64) (State, portero.Decision) {
	d := portero.Decision{Limit: limit}
	if s.B+cost <= limit {
		s.B += cost
		d.Allowed = true
	} else {
		d.RetryAfter = dur(end - now)
	}
	d.Remaining = max(0, limit-s.B) // a settled charge can pass the limit
	if s.B > 0 {
		d.ResetAfter = dur(end - now)
	}
	return s, d
}

// Expiry implements Decider: the end of the stored window.
func (a *FixedWindow) Expiry(s State) int64 { return (s.A + 1) * a.window }

// AnchoredWindow is the fixed window that starts at the first request of an
// absent or expired key and lasts W: the seed's INCR + EXPIRE form. State:
// A = start of the window, B = count admitted in it.
type AnchoredWindow struct{ windowed }

func newAnchoredWindow(l portero.Limit) *AnchoredWindow {
	return &AnchoredWindow{newWindowed(l)}
}

// Decide implements Decider.
func (a *AnchoredWindow) Decide(s State, found bool, now, cost int64) (State, portero.Decision) {
	if !found || now >= s.A+a.window {
		s = State{A: now}
	}
	return countIn(s, s.A+a.window, a.count, now, cost)
}

// Expiry implements Decider: the end of the window.
func (a *AnchoredWindow) Expiry(s State) int64 { return s.A + a.window }

// SlidingCounter estimates the requests of the last W seconds from two fixed
// windows: estimate = prev·(1 − elapsed/W) + cur, where elapsed is the time
// since the current window began. The estimate is computed before counting
// the new request; a request of cost c is admitted when
// estimate + (c − 1) < L (for c = 1: estimate < L), and only admitted
// requests are counted. State: A = index k of the current window,
// B = prev<<32 | cur.
//
// The estimate is computed in float64 exactly as written above (the Redis
// script does the same IEEE operations), so both stores agree.
type SlidingCounter struct{ windowed }

func newSlidingCounter(l portero.Limit) *SlidingCounter {
	return &SlidingCounter{newWindowed(l)}
}

type counterState struct{ k, prev, cur, start int64 }

// at brings s forward to the window containing now and returns the
// unpacked state with now clamped into that window.
func (a *SlidingCounter) at(s State, found bool, now int64) (counterState, int64) {
	k := floorDiv(now, a.window)
	if !found {
		return counterState{k: k, start: k * a.window}, now
	}
	c := counterState{k: s.A, prev: s.B >> 32, cur: s.B & math.MaxUint32}
	switch {
	case k < c.k: // time went back to an earlier window: stay at the start of the last one
		now = c.k * a.window
	case k == c.k+1:
		c = counterState{k: k, prev: c.cur}
	case k > c.k+1:
		c = counterState{k: k}
	}
	c.start = c.k * a.window
	return c, now
}

func (a *SlidingCounter) estimate(c counterState, now int64) float64 {
	elapsed := now - c.start
	// The explicit conversion rounds the product before the sum, so no
	// platform fuses them into one multiply-add: Lua does not.
	return float64(float64(c.prev)*(1-float64(elapsed)/float64(a.window))) + float64(c.cur)
}

func (a *SlidingCounter) admits(est float64, cost int64) bool {
	return est+float64(cost-1) < float64(a.count)
}

// Decide implements Decider.
func (a *SlidingCounter) Decide(s State, found bool, now, cost int64) (State, portero.Decision) {
	c, at := a.at(s, found, now)
	lag := at - now // > 0 when the caller's clock went back to an earlier window
	est := a.estimate(c, at)
	d := portero.Decision{Limit: a.count}
	if a.admits(est, cost) {
		d.Allowed = true
		c.cur += cost
		est += float64(cost)
	} else {
		d.RetryAfter = dur(a.retryAfter(c, at, cost) + lag)
	}
	d.Remaining = a.remaining(est)
	// The whole limit is back when a request of cost L would pass
	// (estimate < 1): sooner than the state's Expiry, which waits for 0.
	if !a.admits(est, a.count) {
		d.ResetAfter = dur(a.retryAfter(c, at, a.count) + lag)
	}
	return State{A: c.k, B: c.prev<<32 | c.cur}, d
}

// remaining counts the cost-1 requests that would still pass at this
// instant: those with est + (n−1) < L.
func (a *SlidingCounter) remaining(est float64) int64 {
	room := float64(a.count) - est
	if !(room > 0) {
		return 0
	}
	n := int64(math.Ceil(room))
	for n > 0 && !a.admits(est, n) {
		n--
	}
	for a.admits(est, n+1) {
		n++
	}
	return n
}

// admitsAfter reports whether a request of cost would be admitted delta ns
// after now if nothing else happened. The estimate never grows with time, so
// this is monotone in delta.
func (a *SlidingCounter) admitsAfter(c counterState, now, delta, cost int64) bool {
	t := now + delta
	s := State{A: c.k, B: c.prev<<32 | c.cur}
	c2, t := a.at(s, true, t)
	return a.admits(a.estimate(c2, t), cost)
}

// retryAfter finds the smallest whole-ns wait after which the request passes.
// The closed form lands within a few ns of it; the float comparison decides
// the last steps, and a bisection guards against anything the closed form
// missed.
func (a *SlidingCounter) retryAfter(c counterState, now, cost int64) int64 {
	w := float64(a.window)
	need := float64(a.count - cost + 1) // admit when estimate < need
	toStart := float64(c.start - now)   // ≤ 0, exact: small numbers only
	var guess float64
	if float64(c.cur) < need && c.prev > 0 {
		// Within this window: prev·(1 − e/W) + cur < need.
		e := w * (1 - (need-float64(c.cur))/float64(c.prev))
		guess = toStart + e
	} else {
		// In the next window, prev' = cur: cur·(1 − e/W) < need.
		e := w * (1 - need/float64(c.cur))
		guess = toStart + w + e
	}
	delta := int64(math.Ceil(guess))
	if delta < 1 {
		delta = 1
	}
	hi := c.start + 2*a.window - now // the estimate is 0 by then
	if delta > hi {
		delta = hi
	}
	for i := 0; i < 4; i++ {
		switch {
		case !a.admitsAfter(c, now, delta, cost):
			delta++
		case delta > 1 && a.admitsAfter(c, now, delta-1, cost):
			delta--
		default:
			return delta
		}
	}
	lo := int64(0) // invariant: not admitted at lo, admitted at hi
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if a.admitsAfter(c, now, mid, cost) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// Expiry implements Decider: the instant the estimate drops below 1, as
// ResetAfter says. A fraction of one request never changes a decision
// (costs are whole: est + c − 1 < L holds with est = cur + f, f < 1, exactly
// when it holds with est = cur), so from then on the state decides like no
// state; the Redis script lets the key expire at the same instant.
func (a *SlidingCounter) Expiry(s State) int64 {
	c := counterState{k: s.A, prev: s.B >> 32, cur: s.B & math.MaxUint32, start: s.A * a.window}
	if !a.admits(a.estimate(c, c.start), a.count) {
		return c.start + a.retryAfter(c, c.start, a.count)
	}
	return c.start
}
