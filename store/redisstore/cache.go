package redisstore

import (
	"sync"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// overCache is the local over-limit cache (Config.OverLimitCache): for a
// Redis key whose last one-hit call was refused, the key's state as the
// script saw it. A later one-hit call on that key is decided locally by the
// rule's algorithm.Decider; a refusal is the answer, and anything else goes
// to Redis. Why that is exact (caller clock) or conservative (server clock)
// is in docs/distributed.md. It is safe for concurrent use.
type overCache struct {
	mu  sync.Mutex
	m   map[string]overEntry
	max int
}

// overEntry is the state of one refused key, as algorithm.State.
type overEntry struct {
	state   algorithm.State
	decider algorithm.Decider
	// shift is added to the local clock (Unix ns) to get the instant the
	// Decider decides at: 0 with the caller's clock; with Redis's clock, the
	// most that Redis's clock can be ahead of the local one plus the call
	// deadline, so that a local refusal holds at every instant at which
	// Redis could still have decided the call.
	shift int64
	// expiry is the instant (in the Decider's time) from which the state
	// equals no state: the entry is of no use then.
	expiry int64
}

func newOverCache(max int) *overCache {
	return &overCache{m: make(map[string]overEntry), max: max}
}

// decide answers a one-hit call at the local instant now from the cache: ok
// is false when the key is not cached or the algorithm would admit (then
// Redis must decide and count).
func (c *overCache) decide(key string, now time.Time, cost int64) (portero.Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.m[key]
	if !found {
		return portero.Decision{}, false
	}
	t := now.UnixNano() + e.shift
	if t >= e.expiry {
		delete(c.m, key)
		return portero.Decision{}, false
	}
	_, d := e.decider.Decide(e.state, true, t, cost)
	if d.Allowed {
		delete(c.m, key) // Redis decides, and a refusal fills the entry again
		return portero.Decision{}, false
	}
	return d, true
}

// put remembers the state of a refused key. When the cache is full it drops
// the expired entries, and then an arbitrary one.
func (c *overCache) put(key string, e overEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, found := c.m[key]; !found && len(c.m) >= c.max {
		now := time.Now().UnixNano()
		for k, x := range c.m {
			if now+x.shift >= x.expiry {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = e
}

// drop forgets key.
func (c *overCache) drop(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

// cacheState turns the state a one-hit script returned with a refusal (the
// three numbers of prelude.lua, instants as seconds and nanoseconds) into
// the algorithm.State of the same algorithm. ok is false for the sliding
// log, whose state is not fixed-size and whose refusals write.
func cacheState(alg portero.Algorithm, a, b, c int64) (algorithm.State, bool) {
	ns := func(s, n int64) int64 { return s*1e9 + n }
	switch alg {
	case portero.FixedWindow:
		return algorithm.State{A: a, B: b}, true // window index, count
	case portero.FixedWindowAnchored:
		return algorithm.State{A: ns(a, b), B: c}, true // start, count
	case portero.SlidingCounter:
		return algorithm.State{A: a, B: b<<32 | c}, true // window index, prev, cur
	case portero.TokenBucket, portero.LeakyMeter:
		return algorithm.State{A: a, B: ns(b, c)}, true // credit or level, last update
	case portero.GCRA, portero.LeakyQueue:
		return algorithm.State{A: ns(a, b)}, true // TAT, last departure
	case calendarAlg:
		return algorithm.State{A: ns(a, 0), B: b}, true // end of the period (s), count
	}
	return algorithm.State{}, false
}
