package memstore

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/portero-rl/portero/algorithm"
)

// A shard's keys live in an open-addressing array of slots, each a few
// 64-bit words: the key's hash, then its state. A one-word algorithm
// (algorithm.WordDecider: GCRA, the leaky queue) has 16-byte slots, four to
// a cache line, and decides on a known key with one compare-and-swap of the
// state word, without the shard lock; the others have 24-byte slots and
// decide under the lock.
//
// What makes the lock-free decision safe is that a slot of an array belongs
// to one key for the array's whole life: a slot goes from empty to one
// key's hash to deleted (a tombstone), never back, and the lock holder
// that deletes a key or moves it to a new array first swaps its state word
// for retired. So a compare-and-swap that succeeds wrote the successor of
// the value it read into the slot of the key it hashed, and one that races
// with a deletion or a move fails and goes to the lock. Tombstones are
// cleared by rebuilding the array (into a new one) when keys and tombstones
// together pass the maximum load.
const (
	empty   = 0 // the hash word of a slot never used in its array
	deleted = 2 // the hash word of a dropped key's slot (a live hash is odd)
	// retired is the state word of a one-word slot that the lock holder
	// has taken over (to delete or move its key, or to decide several hits
	// at once): a lock-free decision that reads it takes the lock instead.
	// No state is retired: GCRA's and the queue's words are instants after
	// a decision's now, and word clamps the one that could wrap to it.
	retired     = math.MinInt64
	retiredWord = 1 << 63 // retired as the uint64 the slot holds
)

// Load factors of an array, in sixteenths: it is rebuilt when more than
// maxLoad of its slots are keys or tombstones, to a size that makes growLoad
// of them keys. So a key costs 16/(13/16) ≈ 20 to 16/(10/16) = 25.6 bytes of
// slots with one-word state, 29.5 to 38.4 with two words.
const (
	maxLoad  = 13 // of 16
	growLoad = 10 // of 16
	minSlots = 8
)

// array is one generation of a shard's slots. Its fields never change; its
// words are read with atomic loads wherever a lock-free decision may race
// with a change, and written under the shard lock (the state word of a
// one-word slot also by compare-and-swap, without it).
type array struct {
	w      []uint64 // size·stride words
	stride int      // words per slot: 2 (hash, state) or 3 (hash, state.A, state.B)
	groups uint64   // home groups: a key's probe starts at the first slot of one
	gw     int      // words per home group: a 64-byte line of 16-byte slots, or one slot
}

func newArray(size, stride int) *array {
	gw := stride // 24-byte slots do not tile a cache line: a group is one slot
	if stride == 2 {
		gw = 8
		size = (size + 3) &^ 3
	}
	// Arrays of more than 32 KiB are page-aligned by the allocator, so a
	// group of four 16-byte slots is one cache line.
	return &array{w: make([]uint64, size*stride), stride: stride, groups: uint64(size * stride / gw), gw: gw}
}

func (a *array) size() int { return len(a.w) / a.stride }

// home returns the index of the first word of the slot where a probe for h
// starts: the low 32 bits of h scaled to the groups (the high bits chose
// the shard).
func (a *array) home(h uint64) int { return int(uint64(uint32(h))*a.groups>>32) * a.gw }

// find returns the index of h's slot (its hash word), or -1.
func (a *array) find(h uint64) int {
	w := a.w
	for i := a.home(h); ; {
		switch atomic.LoadUint64(&w[i]) {
		case h:
			return i
		case empty:
			return -1 // an array always has empty slots: maxLoad < 16
		}
		if i += a.stride; i == len(w) {
			i = 0
		}
	}
}

// state returns the state of the slot at i. The shard is locked, so a
// one-word state is not retired (only the lock holder retires) but may
// change by compare-and-swap meanwhile.
func (a *array) state(i int) algorithm.State {
	s := algorithm.State{A: int64(atomic.LoadUint64(&a.w[i+1]))}
	if a.stride == 3 {
		s.B = int64(a.w[i+2])
	}
	return s
}

// set writes the state of the slot at i; the shard is locked. A one-word
// state written so may overwrite a compare-and-swap that raced with it: the
// caller has retired the word (AllowAll) or holds the only copy of the slot.
func (a *array) set(i int, s algorithm.State) {
	atomic.StoreUint64(&a.w[i+1], uint64(word(s.A)))
	if a.stride == 3 {
		a.w[i+2] = uint64(s.B)
	}
}

// word keeps a one-word state from being retired: only a state that has
// wrapped around the end of time could be, and it moves by a nanosecond.
func word(v int64) int64 {
	if v == retired {
		return retired + 1
	}
	return v
}

// shard is one lock's worth of a rule's keys: an array of slots for the
// fixed-size algorithms or a map of logs for the sliding log. It is one
// cache line (TestShardSize), so that a decision touches one line of shard
// and neighbouring shards' locks never share one.
type shard struct {
	mu     sync.Mutex            // held by every change but a one-word state's compare-and-swap
	tab    atomic.Pointer[array] // nil until the first key
	n      int                   // keys in tab
	used   int                   // slots of tab that are not empty: keys and tombstones
	max    int                   // most keys this shard may hold
	rnd    uint64                // xorshift state for eviction samples
	logs   map[uint64]*algorithm.Log
	stride int // words per slot of tab
}

// stateWord returns the state word of h's slot in the current array of a
// shard of one-word slots, or nil, without the lock: what a lock-free
// decision swaps.
func (sh *shard) stateWord(h uint64) *uint64 {
	a := sh.tab.Load()
	if a == nil {
		return nil
	}
	w := a.w
	for i := a.home(h); ; {
		switch atomic.LoadUint64(&w[i]) {
		case h:
			return &w[i+1]
		case empty:
			return nil
		}
		if i += 2; i == len(w) {
			i = 0
		}
	}
}

// find returns h's slot in the current array and its index, or -1. The
// shard is locked.
func (sh *shard) find(h uint64) (*array, int) {
	a := sh.tab.Load()
	if a == nil {
		return nil, -1
	}
	return a, a.find(h)
}

// maxSlots is the array size at which the shard holds max keys at the load
// an array is rebuilt to, which leaves room for tombstones at the cap.
func (sh *shard) maxSlots() int { return max(minSlots, (sh.max*16+growLoad-1)/growLoad) }

// insert adds h, which must be absent, with state s. When the shard is at
// its cap it first evicts (see evict); when the array is too full it is
// rebuilt. The shard is locked.
func (sh *shard) insert(h uint64, s algorithm.State, now int64, dec algorithm.Decider) {
	if sh.n >= sh.max {
		sh.evict(h, now, dec)
	}
	a := sh.tab.Load()
	if a == nil || (sh.used+1)*16 > a.size()*maxLoad {
		a = sh.rebuild()
	}
	w := a.w
	i := a.home(h)
	for atomic.LoadUint64(&w[i]) != empty {
		if i += a.stride; i == len(w) {
			i = 0
		}
	}
	// The state before the hash: a lock-free decision that finds the hash
	// finds the state.
	a.set(i, s)
	atomic.StoreUint64(&w[i], h)
	sh.n++
	sh.used++
}

// rebuild moves the keys to a new array sized for one more key at
// growLoad (at most maxSlots), without tombstones, and returns it. Each
// one-word state is retired in the old array as it is copied, so that a
// compare-and-swap on the old copy fails.
func (sh *shard) rebuild() *array {
	size := max(minSlots, ((sh.n+1)*16+growLoad-1)/growLoad)
	size = min(size, sh.maxSlots())
	na := newArray(size, sh.stride)
	if old := sh.tab.Load(); old != nil {
		w, s := old.w, old.stride
		for i := 0; i < len(w); i += s {
			h := w[i] // only the lock holder writes hash words
			if h&1 == 0 {
				continue // empty or deleted
			}
			st := algorithm.State{A: int64(atomic.SwapUint64(&w[i+1], retiredWord))}
			if s == 3 {
				st.B = int64(w[i+2])
			}
			j := na.home(h)
			for na.w[j] != empty {
				if j += s; j == len(na.w) {
					j = 0
				}
			}
			na.w[j], na.w[j+1] = h, uint64(st.A) // na is not published yet
			if s == 3 {
				na.w[j+2] = uint64(st.B)
			}
		}
	}
	sh.tab.Store(na)
	sh.used = sh.n
	return na
}

// deleteAt drops the key of the slot at i of the current array, leaving a
// tombstone; the shard is locked.
func (sh *shard) deleteAt(a *array, i int) {
	atomic.StoreUint64(&a.w[i+1], retiredWord)
	atomic.StoreUint64(&a.w[i], deleted)
	sh.n--
}

// dropIfExpired drops the key of the slot at i if its state has expired at
// now, and reports whether it did. A one-word state is retired only if it
// is still the one found expired: a decision may renew it meanwhile.
func (sh *shard) dropIfExpired(a *array, i int, now int64, dec algorithm.Decider) bool {
	for {
		s := a.state(i)
		if dec.Expiry(s) > now {
			return false
		}
		if a.stride == 3 || atomic.CompareAndSwapUint64(&a.w[i+1], uint64(s.A), retiredWord) {
			sh.deleteAt(a, i)
			return true
		}
	}
}

// evictSample is how many keys evict looks at in each of its two places.
const evictSample = 8

// evict makes room for one more key. It looks at up to evictSample keys of
// the probe run where h would go and as many from a random place. It drops
// every one whose state has expired (which changes no decision); if none
// had, it drops the one with the most room left (the key that has used
// least of its limit, whose loss gives away least), and among those the one
// whose state expires first. The shard is locked and not empty.
func (sh *shard) evict(h uint64, now int64, dec algorithm.Decider) {
	a := sh.tab.Load()
	var expired [2 * evictSample]int
	ne := 0
	victim := -1
	var vRoom, vExp int64
	for _, start := range [2]int{a.home(h), int(sh.random()%uint64(a.size())) * a.stride} {
		i := start
		for range evictSample {
			for a.w[i]&1 == 0 { // skip empty and deleted slots; the shard has keys
				if i += a.stride; i == len(a.w) {
					i = 0
				}
			}
			s := a.state(i)
			if exp := dec.Expiry(s); exp <= now {
				expired[ne] = i
				ne++
			} else if ne == 0 {
				_, d := dec.Decide(s, true, now, 1)
				if victim < 0 || d.Remaining > vRoom || d.Remaining == vRoom && exp < vExp {
					victim, vRoom, vExp = i, d.Remaining, exp
				}
			}
			if i += a.stride; i == len(a.w) {
				i = 0
			}
		}
	}
	dropped := false
	for _, i := range expired[:ne] {
		// A repeat in the sample was dropped already; a key renewed since
		// it was looked at stays.
		if a.w[i]&1 == 1 && sh.dropIfExpired(a, i, now, dec) {
			dropped = true
		}
	}
	if dropped {
		return
	}
	if victim < 0 { // every expired one was renewed meanwhile: take one of them
		victim = expired[0]
	}
	sh.deleteAt(a, victim)
}

func (sh *shard) random() uint64 {
	x := sh.rnd
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	sh.rnd = x
	return x
}

// sweepFixed drops the expired keys of slots [from, to) of the current
// array and returns how many it dropped. After the last chunk it gives an
// emptied shard's memory back, or rebuilds an array that is more than a
// quarter tombstones. The shard is locked.
func (sh *shard) sweepFixed(from, to int, now int64, dec algorithm.Decider) int {
	a := sh.tab.Load()
	if a == nil {
		return 0
	}
	dropped := 0
	to = min(to, a.size())
	for i := from * a.stride; i < to*a.stride; i += a.stride {
		if a.w[i]&1 == 1 && sh.dropIfExpired(a, i, now, dec) {
			dropped++
		}
	}
	if to == a.size() {
		switch {
		case sh.n == 0:
			sh.tab.Store(nil) // a decision still probing it finds no key and takes the lock
			sh.used = 0
		case (sh.used-sh.n)*4 > a.size():
			sh.rebuild()
		}
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
