package algorithm

import (
	"github.com/portero-rl/portero"
)

// SlidingLog keeps the instant of every admitted cost unit and admits a
// request of cost c at t when the entries inside (t−W, t] plus c are at most
// L: an entry exactly W old has expired, and only admitted requests are
// logged. So at most L are admitted in any such interval. Its state, a Log,
// grows to L entries per key.
type SlidingLog struct{ windowed }

// NewSlidingLog returns the sliding log for l.
func NewSlidingLog(l portero.Limit) (*SlidingLog, error) {
	if err := l.ValidateFor(portero.SlidingLog); err != nil {
		return nil, err
	}
	return &SlidingLog{newWindowed(l)}, nil
}

// Log is one key's sliding-log state: a ring of admitted instants, oldest
// first. The zero value is an empty log. A Log is not safe for concurrent
// use; the store that owns it locks it.
type Log struct {
	ring   []int64
	head   int   // index of the oldest entry
	n      int   // entries in use
	latest int64 // the latest instant decided at
}

// Len returns the number of entries kept.
func (l *Log) Len() int { return l.n }

func (l *Log) at(i int) int64 { return l.ring[(l.head+i)%len(l.ring)] }

// Clone returns a copy of l that shares nothing with it.
func (l *Log) Clone() *Log {
	c := *l
	c.ring = make([]int64, len(l.ring))
	copy(c.ring, l.ring)
	return &c
}

// Decide prunes the entries that have expired at now and returns the
// decision for a request of cost (which must have passed CheckCost). It
// records nothing: call Record to commit an admitted request.
func (a *SlidingLog) Decide(l *Log, now, cost int64) portero.Decision {
	return a.DecideAfter(l, now, 0, cost)
}

// DecideAfter is Decide for a request that follows pending units admitted
// at now but not yet recorded (earlier hits on the same rule and key in one
// all-or-nothing call): they count as entries logged at now, the newest.
// With pending 0 it is Decide. A cost above L is refused, never admitted.
// A cost of 0 takes nothing: its Remaining and ResetAfter are what stands
// at now.
func (a *SlidingLog) DecideAfter(l *Log, now, pending, cost int64) portero.Decision {
	var lag int64 // > 0 when the caller's clock is behind the log's
	if l.n > 0 && now < l.latest {
		lag = l.latest - now
		now = l.latest // time went back: the latest instant stands
	}
	l.latest = now
	for l.n > 0 && l.at(0) <= now-a.window {
		l.head = (l.head + 1) % len(l.ring)
		l.n--
	}
	if l.n == 0 {
		// An empty log equals no log: nothing holds the clock forward, and
		// Record logs at the caller's instant.
		now, lag = now-lag, 0
	}
	d := portero.Decision{Limit: a.count}
	n := int64(l.n) + pending
	if n+cost <= a.count {
		d.Allowed = true
		n += cost
	} else {
		// Wait until the entry that makes room expires: the
		// (n+cost−L)-th oldest, where the pending ones are the newest and
		// expire one window from now.
		i := n + cost - a.count - 1
		expires := now + a.window
		if i < int64(l.n) {
			expires = l.at(int(i)) + a.window
		}
		d.RetryAfter = dur(expires - now + lag)
	}
	d.Remaining = max(0, a.count-n)
	if n > 0 {
		// The newest entry is at now when something is (to be) logged at
		// now; otherwise the newest one kept.
		newest := now
		if pending == 0 && (!d.Allowed || cost == 0) {
			newest = l.at(l.n - 1)
		}
		d.ResetAfter = dur(newest + a.window - now + lag)
	}
	return d
}

// Record logs cost entries at now, after Decide admitted them.
func (a *SlidingLog) Record(l *Log, now, cost int64) {
	if l.n > 0 && now < l.latest {
		now = l.latest
	}
	for range cost {
		if l.n == len(l.ring) {
			l.grow(a.count)
		}
		l.ring[(l.head+l.n)%len(l.ring)] = now
		l.n++
	}
	l.latest = now
}

func (l *Log) grow(max int64) {
	size := 2 * len(l.ring)
	if size < 4 {
		size = 4
	}
	if int64(size) > max {
		size = int(max)
	}
	ring := make([]int64, size)
	for i := range l.n {
		ring[i] = l.at(i)
	}
	l.ring, l.head = ring, 0
}

// Expiry returns the instant from which l holds nothing: W after its newest
// entry.
func (a *SlidingLog) Expiry(l *Log) int64 {
	if l.n == 0 {
		return l.latest
	}
	return l.at(l.n-1) + a.window
}
