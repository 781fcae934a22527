package algorithm

import (
	"math"
	"math/bits"

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
// absent or expired key and lasts W: the INCR + EXPIRE form. State:
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
// The rule is decided in whole numbers, never in floating point, so an
// estimate of exactly L refuses: with L, c and cur whole, it holds exactly
// when ⌊estimate⌋ + c ≤ L, and ⌊estimate⌋ = cur + prev − ⌈prev·elapsed/W⌉,
// prev less the requests of the previous window that have slid out
// (slid). The waits are closed forms of the same integers (firstSlid). The
// Redis script computes the same integers, so both stores agree.
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

// slid returns ⌈p·e/W⌉ for 0 ≤ p < 2^32 and 0 ≤ e < W: how many of the p
// requests of the previous window have slid out e ns into the current one.
// The product is taken in 128 bits, so it is exact for any W.
func (a *SlidingCounter) slid(p, e int64) int64 {
	hi, lo := bits.Mul64(uint64(p), uint64(e))
	q, r := bits.Div64(hi, lo, uint64(a.window)) // hi < W, since e < W
	if r != 0 {
		q++
	}
	return int64(q)
}

// firstSlid returns the first elapsed time e (ns, at most W) at which
// slid(p, e) ≥ n, for 0 < n ≤ p: ⌈p·e/W⌉ ≥ n ⟺ e > (n−1)·W/p.
func (a *SlidingCounter) firstSlid(p, n int64) int64 {
	hi, lo := bits.Mul64(uint64(n-1), uint64(a.window))
	q, _ := bits.Div64(hi, lo, uint64(p)) // hi < p, since n−1 < p
	return int64(q) + 1
}

// floorEstimate returns ⌊estimate⌋ of c at instant now of its window.
func (a *SlidingCounter) floorEstimate(c counterState, now int64) int64 {
	return c.cur + c.prev - a.slid(c.prev, now-c.start)
}

// Decide implements Decider.
func (a *SlidingCounter) Decide(s State, found bool, now, cost int64) (State, portero.Decision) {
	c, at := a.at(s, found, now)
	lag := at - now // > 0 when the caller's clock went back to an earlier window
	est := a.floorEstimate(c, at)
	d := portero.Decision{Limit: a.count}
	if est+cost <= a.count {
		d.Allowed = true
		c.cur += cost
		est += cost
	} else {
		d.RetryAfter = dur(a.retryAfter(c, at, cost) + lag)
	}
	// Remaining counts the cost-1 requests that would still pass now.
	d.Remaining = max(0, a.count-est)
	// The whole limit is back when a request of cost L would pass
	// (estimate < 1): sooner than the state's Expiry, which waits for 0.
	if est >= 1 {
		d.ResetAfter = dur(a.retryAfter(c, at, a.count) + lag)
	}
	return State{A: c.k, B: c.prev<<32 | c.cur}, d
}

// retryAfter returns the smallest whole-ns wait after which a request of
// cost (at most L) passes, for a state that refuses it at now: in the
// current window once enough of prev has slid out, ⌈prev·e/W⌉ ≥
// cur + prev − (L − cost); when cur alone is too many, in the next window,
// where cur is the previous window's count, at most W into it (a wait of
// W is the window after, where the estimate is 0).
func (a *SlidingCounter) retryAfter(c counterState, now, cost int64) int64 {
	room := a.count - cost // the most ⌊estimate⌋ that admits cost
	if c.cur <= room {
		return c.start + a.firstSlid(c.prev, c.cur+c.prev-room) - now
	}
	return c.start + a.window + a.firstSlid(c.cur, c.cur-room) - now
}

// Expiry implements Decider: the instant the estimate drops below 1, as
// ResetAfter says. A fraction of one request never changes a decision
// (costs are whole: est + c − 1 < L holds with est = cur + f, f < 1, exactly
// when it holds with est = cur), so from then on the state decides like no
// state; the Redis script lets the key expire at the same instant.
func (a *SlidingCounter) Expiry(s State) int64 {
	c := counterState{k: s.A, prev: s.B >> 32, cur: s.B & math.MaxUint32, start: s.A * a.window}
	if c.cur+c.prev >= 1 {
		return c.start + a.retryAfter(c, c.start, a.count)
	}
	return c.start
}
