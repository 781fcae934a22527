package memstore

import (
	"sync/atomic"
	"time"
	_ "unsafe" // for go:linkname
)

// The store's own clock (Config.Now nil) is the wall time at New advanced by
// the monotonic clock: one read of the runtime's monotonic clock per
// decision, added to a base taken once (time.Now reads two clocks). Where
// that read is slow (some VMs), it costs as much as the rest of a hot-key
// decision, and it orders the CPU (Linux reads the TSC with RDTSCP, or
// LFENCE then RDTSC where RDTSCP is missing), so that the cache misses of
// consecutive decisions on cold keys cannot overlap.
//
// With Config.ClockResolution the forms that read the clock take a reading
// that a goroutine of the store refreshes every ClockResolution instead:
// one atomic load per decision. The goroutine parks after a hundred
// readings that no decision used, and the clock is then read directly
// until it has woken up, so that an idle store costs nothing.

// coarseClock is the clock of Config.ClockResolution.
type coarseClock struct {
	ns     atomic.Int64  // Unix ns: the latest reading, never decreasing
	used   atomic.Bool   // a decision took ns since the last refresh
	parked atomic.Bool   // the refresher is asleep: read the clock directly
	waking atomic.Bool   // a wake-up is on its way
	wake   chan struct{} // buffered: one wake-up
	done   chan struct{} // closed when the refresher has returned
}

// advance makes ns at least t, so that the clock never goes back, also
// between a direct reading and the refresher's next one.
func (c *coarseClock) advance(t int64) int64 {
	for {
		old := c.ns.Load()
		if t <= old {
			return old
		}
		if c.ns.CompareAndSwap(old, t) {
			return t
		}
	}
}

// clockDone is closed when the coarse clock's refresher has returned (at
// once without one).
func (s *Store) clockDone() chan struct{} {
	if s.coarse == nil {
		return closed
	}
	return s.coarse.done
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// exactNS reads the monotonic clock: Unix ns. The runtime's clock is read
// directly, without time.Since's checks around it, unless the store
// started in a synctest bubble, where time.Now has no monotonic reading and
// time.Since reads the bubble's clock. table.allow inlines the common case
// (Store.monotonic).
func (s *Store) exactNS() int64 {
	if s.monoBase != 0 {
		return s.monoBase + nanotime()
	}
	return s.startNS + int64(time.Since(s.start))
}

// nanotime is the runtime's monotonic clock in ns, which time.Since reads.
// The runtime keeps it open to packages outside (go.dev/issue/67401).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// nowNS is Now in Unix ns, without building a time.Time.
func (s *Store) nowNS() int64 {
	if c := s.coarse; c != nil {
		if !c.parked.Load() {
			if !c.used.Load() { // a load, not a store, on the common path: no line to bounce
				c.used.Store(true)
			}
			return c.ns.Load()
		}
		t := c.advance(s.exactNS())
		if c.waking.CompareAndSwap(false, true) {
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
		return t
	}
	if s.custom != nil {
		return s.custom().UnixNano()
	}
	return s.exactNS()
}

// clockTime is the store's clock as a time.Time: with a monotonic reading
// for its own clock, so that it compares and subtracts like time.Now's.
func (s *Store) clockTime() time.Time {
	if s.custom != nil {
		return s.custom()
	}
	return s.start.Add(time.Duration(s.nowNS() - s.startNS))
}

// refresh keeps the coarse clock within a resolution of the monotonic one
// while decisions read it, and parks when none has for a hundred readings.
func (s *Store) refresh(res time.Duration) {
	c := s.coarse
	defer close(c.done)
	tick := time.NewTicker(res)
	defer tick.Stop()
	for unused := 0; ; {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		c.advance(s.exactNS())
		if c.used.Swap(false) {
			unused = 0
			continue
		}
		if unused++; unused < 100 {
			continue
		}
		c.parked.Store(true)
		tick.Stop()
		select {
		case <-s.stop:
			return
		case <-c.wake:
		}
		c.advance(s.exactNS())
		c.parked.Store(false)
		c.waking.Store(false)
		tick.Reset(res)
		unused = 0
	}
}
