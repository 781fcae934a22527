package memstore

import (
	"sync"

	"github.com/portero-rl/portero/algorithm"
)

// entry is one key's fixed-size state: 24 bytes. h is the key's 64-bit hash
// (never 0; 0 marks an empty slot).
type entry struct {
	h uint64
	s algorithm.State
}

// Load factors of a shard's open-addressing table, in sixteenths: it grows
// when more than maxLoad of its slots are in use, to a size that makes
// growLoad of them in use. So 24/(13/16) ≈ 30 to 24/(10/16) = 38.4 bytes of
// slots per key.
const (
	maxLoad  = 13 // of 16
	growLoad = 10 // of 16
	minSlots = 8
)

// shard is one lock's worth of a rule's keys: an open-addressing table with
// linear probing and backward-shift deletion (no tombstones) for the
// fixed-size algorithms, or a map of logs for the sliding log. It is padded
// so that neighbouring shards' locks never share a cache line.
type shard struct {
	mu    sync.Mutex
	slots []entry
	n     int                       // entries in slots
	logs  map[uint64]*algorithm.Log // sliding log only
	max   int                       // most keys this shard may hold
	rnd   uint64                    // xorshift state for eviction samples
	_     [64]byte
}

// home returns the slot where a probe for h starts: the low 32 bits of h
// scaled to the table size (the high bits chose the shard).
func home(h uint64, n int) int { return int(uint64(uint32(h)) * uint64(n) >> 32) }

// find returns the index of h's slot, or -1.
func (sh *shard) find(h uint64) int {
	slots := sh.slots
	if len(slots) == 0 {
		return -1
	}
	i := home(h, len(slots))
	for {
		switch slots[i].h {
		case h:
			return i
		case 0:
			return -1
		}
		if i++; i == len(slots) {
			i = 0
		}
	}
}

// maxSlots is the table size at which the shard holds max keys at no more
// than the maximum load.
func (sh *shard) maxSlots() int { return max(minSlots/4, (sh.max*16+maxLoad-1)/maxLoad) }

// insert adds h, which must be absent, with state s. When the shard is at
// its cap it first evicts (see evict); when the table is too full it grows.
func (sh *shard) insert(h uint64, s algorithm.State, now int64, dec algorithm.Decider) {
	if sh.n >= sh.max {
		sh.evict(h, now, dec)
	}
	if (sh.n+1)*16 > len(sh.slots)*maxLoad {
		sh.grow()
	}
	slots := sh.slots
	i := home(h, len(slots))
	for slots[i].h != 0 {
		if i++; i == len(slots) {
			i = 0
		}
	}
	slots[i] = entry{h, s}
	sh.n++
}

func (sh *shard) grow() {
	size := max(minSlots, ((sh.n+1)*16+growLoad-1)/growLoad)
	size = min(size, sh.maxSlots())
	old := sh.slots
	slots := make([]entry, size)
	for _, e := range old {
		if e.h == 0 {
			continue
		}
		i := home(e.h, size)
		for slots[i].h != 0 {
			if i++; i == size {
				i = 0
			}
		}
		slots[i] = e
	}
	sh.slots = slots
}

// deleteAt empties slot i and shifts back the entries after it that
// probed past it, so that no tombstone is needed.
func (sh *shard) deleteAt(i int) {
	slots := sh.slots
	n := len(slots)
	j := i
	for {
		if j++; j == n {
			j = 0
		}
		e := slots[j]
		if e.h == 0 {
			break
		}
		// e may move into the hole at i unless its home lies cyclically in
		// (i, j]: then i is before its home and a probe would not find it.
		k := home(e.h, n)
		if (i <= j && (k <= i || k > j)) || (i > j && k <= i && k > j) {
			slots[i] = e
			i = j
		}
	}
	slots[i] = entry{}
	sh.n--
}

// evictSample is how many entries evict looks at in each of its two places.
const evictSample = 8

// evict makes room for one more key. It looks at up to evictSample entries
// of the probe run where h would go and as many from a random place. It
// drops every one whose state has expired (which changes no decision); if
// none had, it drops the one with the most room left (the key that has used
// least of its limit, whose loss gives away least), and among those the one
// whose state expires first.
func (sh *shard) evict(h uint64, now int64, dec algorithm.Decider) {
	var expired [2 * evictSample]uint64
	ne := 0
	var victim uint64
	var vRoom, vExp int64
	for _, start := range [2]int{home(h, len(sh.slots)), int(sh.random() % uint64(len(sh.slots)))} {
		slots := sh.slots
		i := start
		for range evictSample {
			for slots[i].h == 0 { // the table is never empty here
				if i++; i == len(slots) {
					i = 0
				}
			}
			e := slots[i]
			if exp := dec.Expiry(e.s); exp <= now {
				expired[ne] = e.h
				ne++
			} else if ne == 0 {
				_, d := dec.Decide(e.s, true, now, 1)
				if victim == 0 || d.Remaining > vRoom || d.Remaining == vRoom && exp < vExp {
					victim, vRoom, vExp = e.h, d.Remaining, exp
				}
			}
			if i++; i == len(slots) {
				i = 0
			}
		}
	}
	if ne == 0 {
		sh.deleteAt(sh.find(victim))
		return
	}
	for _, c := range expired[:ne] {
		if i := sh.find(c); i >= 0 { // a repeat in the sample was gone already
			sh.deleteAt(i)
		}
	}
}

func (sh *shard) random() uint64 {
	x := sh.rnd
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	sh.rnd = x
	return x
}

// sweepFixed drops the expired entries of slots [from, to); it returns how
// many it dropped.
func (sh *shard) sweepFixed(from, to int, now int64, dec algorithm.Decider) int {
	dropped := 0
	to = min(to, len(sh.slots))
	for i := from; i < to; {
		e := sh.slots[i]
		if e.h != 0 && dec.Expiry(e.s) <= now {
			sh.deleteAt(i) // may pull a later entry into i: look at i again
			dropped++
			continue
		}
		i++
	}
	if sh.n == 0 && len(sh.slots) > minSlots {
		sh.slots = nil // give an emptied shard's memory back
	}
	return dropped
}

// evictLog makes room for one more sliding log, choosing as evict does
// among a few logs (Go's map iteration starts at a random place).
func (sh *shard) evictLog(now int64, a *algorithm.SlidingLog) {
	var victim uint64
	var vRoom, vExp int64
	seen, dropped := 0, 0
	for h, l := range sh.logs {
		if exp := a.Expiry(l); exp <= now {
			delete(sh.logs, h)
			dropped++
		} else if dropped == 0 {
			d := a.Decide(l, now, 1) // prunes, records nothing
			if seen == 0 || d.Remaining > vRoom || d.Remaining == vRoom && exp < vExp {
				victim, vRoom, vExp = h, d.Remaining, exp
			}
		}
		if seen++; seen == 2*evictSample {
			break
		}
	}
	if dropped == 0 {
		delete(sh.logs, victim)
	}
}
