// Package memstore keeps Portero's rate-limit state in memory, for one
// process: a sharded store with bounded memory, safe for concurrent use.
//
// Each rule (the whole portero.Rule value) has its own table, split into
// shards with a mutex each. A key is found by a 64-bit hash, random per
// store and rule (the runtime's wyhash mixing): its high bits pick the shard
// and the low bits where linear probing starts in the shard's array. A
// slot holds the hash and the state, 16 bytes for GCRA and the leaky queue
// (one word of state), 24 for the others; arrays are rebuilt past 13/16
// full, so a key costs 20 to 38 bytes. The sliding log keeps a map of logs
// per shard: 8 bytes per admitted request plus about 100 per key.
//
// For GCRA and the leaky queue a decision on a known key is one
// compare-and-swap of its state word, without the lock (why that is exact:
// table.go); everything else takes the shard's lock.
//
// The key itself is not stored: two keys with equal hashes share one
// state, which limits each as if the other's requests were its own
// (stricter, never looser). With 63 bits the chance of any collision among
// a million keys is about 5·10⁻⁸, and the random seeds keep anyone from
// aiming for one.
//
// Config.MaxKeys caps each rule's keys, so a flood of distinct keys costs
// bounded memory. A full shard makes room by looking at 16 entries, near
// the new key and at random: it drops the expired ones (returned to
// "full", which changes no decision), else the one with the most room
// left, so a client that has used up its limit survives a flood of
// one-request addresses; a key is admitted beyond its limit only after
// being evicted that way. A sweeper (Config.SweepInterval) drops expired
// state in the background.
//
// Every decision has a form that takes the instant (AllowN, AllowAll) and
// one that reads the store's clock (Allow, Wait): Config.Now, or the wall
// time at New advanced by the monotonic clock, coarse with
// Config.ClockResolution (clock.go).
package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Defaults for the zero Config.
const (
	// DefaultMaxKeys is the default cap on the keys of each rule: 2²⁰, about
	// 40 MB at most per rule for the fixed-size algorithms (27 MB for GCRA
	// and the leaky queue).
	DefaultMaxKeys = 1 << 20
	// DefaultSweepInterval is the default time between sweeps.
	DefaultSweepInterval = time.Minute
)

// Config configures a Store. The zero value gives the defaults.
type Config struct {
	// Shards is the number of locks each rule's keys are spread over,
	// rounded up to a power of two. 0 means the smallest power of two at
	// least 4×GOMAXPROCS; it is lowered when MaxKeys is smaller.
	Shards int
	// MaxKeys caps the keys kept for each rule (each shard keeps at most
	// MaxKeys/Shards); beyond it the store evicts (see the package doc).
	// 0 means DefaultMaxKeys.
	MaxKeys int
	// SweepInterval is the time between sweeps of expired state by a
	// background goroutine, which Close stops. 0 means
	// DefaultSweepInterval; a negative value turns the sweeper off.
	SweepInterval time.Duration
	// Now is the clock of the forms that read one (Allow, Wait) and of the
	// sweeper. nil means the store's own: the wall time at New plus the
	// monotonic time since, one clock read and never going back. A program
	// on a virtual clock sets Now to it (or turns the sweeper off).
	Now func() time.Time
	// ClockResolution, when positive, makes the store's own clock a reading
	// that a goroutine refreshes every ClockResolution while decisions use
	// it: an atomic load instead of a clock read, behind the clock by up to
	// the resolution plus the scheduler's delay, never ahead (clock.go).
	// It needs Now nil.
	ClockResolution time.Duration
}

// Store is an in-memory portero.Store. Create it with New; it is safe for
// concurrent use. It owns a sweeper goroutine (unless Config.SweepInterval
// is negative) and, with Config.ClockResolution, a clock goroutine, which
// Close stops; after Close every method returns an error wrapping
// portero.ErrClosed.
type Store struct {
	shardBits uint
	perShard  int
	custom    func() time.Time // Config.Now; nil for the store's own clock
	start     time.Time        // with a monotonic reading
	startNS   int64            // start in Unix ns
	monoBase  int64            // startNS minus the runtime's clock then; 0 in a synctest bubble (exactNS)
	monotonic bool             // the store's clock is monoBase + nanotime: no Config.Now, ClockResolution or bubble
	coarse    *coarseClock     // Config.ClockResolution; nil reads the clock
	interval  time.Duration

	tables sync.Map   // portero.Rule → *table
	mu     sync.Mutex // serializes creating tables
	nextID uint64     // guarded by mu

	leases leaseTables // concurrency leases (lease.go)

	closed    atomic.Bool
	closeOnce sync.Once
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the sweeper has returned
}

var _ portero.Store = (*Store)(nil)

// New validates cfg and returns a Store, with its sweeper started.
func New(cfg Config) (*Store, error) {
	if cfg.Shards < 0 {
		return nil, fmt.Errorf("memstore: shards %d: must not be negative", cfg.Shards)
	}
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("memstore: max keys %d: must not be negative", cfg.MaxKeys)
	}
	if cfg.ClockResolution < 0 {
		return nil, fmt.Errorf("memstore: clock resolution %v: must not be negative", cfg.ClockResolution)
	}
	if cfg.ClockResolution > 0 && cfg.Now != nil {
		return nil, fmt.Errorf("memstore: clock resolution %v: applies to the store's own clock, not to Config.Now", cfg.ClockResolution)
	}
	shards := cfg.Shards
	if shards == 0 {
		shards = 4 * runtime.GOMAXPROCS(0)
	}
	if shards > 1<<16 {
		return nil, fmt.Errorf("memstore: shards %d: at most %d", cfg.Shards, 1<<16)
	}
	maxKeys := cmp.Or(cfg.MaxKeys, DefaultMaxKeys)
	shardBits := uint(bits.Len(uint(shards - 1))) // round up to a power of two
	for shardBits > 0 && maxKeys>>shardBits == 0 {
		shardBits-- // never more shards than keys, so the cap holds exactly
	}
	s := &Store{
		shardBits: shardBits,
		perShard:  maxKeys >> shardBits,
		custom:    cfg.Now,
		start:     time.Now(),
		interval:  cmp.Or(cfg.SweepInterval, DefaultSweepInterval),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	s.startNS = s.start.UnixNano()
	if s.start != s.start.Round(0) { // a monotonic reading: not in a synctest bubble
		s.monoBase = s.startNS - nanotime()
	}
	if res := cfg.ClockResolution; res > 0 {
		s.coarse = &coarseClock{wake: make(chan struct{}, 1), done: make(chan struct{})}
		s.coarse.ns.Store(s.startNS)
		go s.refresh(res)
	}
	s.monotonic = s.monoBase != 0 && s.custom == nil && s.coarse == nil
	if s.interval > 0 {
		go s.sweeper()
	} else {
		close(s.done)
	}
	return s, nil
}

// Now returns the instant by the store's clock (Config.Now, or the store's
// own, coarse with Config.ClockResolution), the one that Allow and Wait
// use. Pass it to AllowN or AllowAll to mix the two forms.
func (s *Store) Now() time.Time { return s.clockTime() }

// table is one rule's state: its algorithm and its shards.
type table struct {
	id     uint64 // order in which AllowAll locks shards
	rule   portero.Rule
	dec    algorithm.Decider     // fixed-size algorithms
	word   algorithm.WordDecider // dec, when its state is one word
	gcra   *algorithm.GCRA       // dec, when it is GCRA: called directly, so inlined
	log    *algorithm.SlidingLog // sliding log
	max    int64                 // largest cost
	seed   maphash.Seed
	k      [4]uint64 // seeds of strHash
	shift  uint      // 64 − shard bits
	mask   uint64    // shards − 1
	shards []shard
	store  *Store
}

// table returns rule's table, creating it on first use.
func (s *Store) table(rule portero.Rule) (*table, error) {
	rule.Budget = 0 // store/budget's, not the state's
	if t, ok := s.tables.Load(rule); ok {
		return t.(*table), nil
	}
	if err := rule.Validate(); err != nil {
		return nil, err
	}
	t := &table{rule: rule, seed: maphash.MakeSeed(), shift: 64 - s.shardBits, mask: 1<<s.shardBits - 1, store: s}
	for i := range t.k {
		t.k[i] = maphash.Comparable(t.seed, -1-i)
	}
	if rule.Algorithm == portero.SlidingLog {
		l, err := algorithm.NewSlidingLog(rule.Limit)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", rule.Name, err)
		}
		t.log, t.max = l, l.MaxCost()
	} else {
		d, err := algorithm.New(rule.Algorithm, rule.Limit)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", rule.Name, err)
		}
		t.dec, t.max = d, d.MaxCost()
		t.word, _ = d.(algorithm.WordDecider)
		t.gcra, _ = d.(*algorithm.GCRA)
	}
	t.shards = make([]shard, 1<<s.shardBits)
	for i := range t.shards {
		sh := &t.shards[i]
		sh.max = s.perShard
		sh.rnd = maphash.Comparable(t.seed, i) | 1
		sh.stride = 3
		if t.word != nil {
			sh.stride = 2
		}
		if t.log != nil {
			sh.logs = map[uint64]*algorithm.Log{}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.tables.Load(rule); ok {
		return old.(*table), nil
	}
	t.id = s.nextID
	s.nextID++
	s.tables.Store(rule, t)
	return t, nil
}

// hash returns key's hash under t. Its lowest bit is always set, so that 0
// can mark an empty slot; the 63 bits left make a collision among a million
// keys about as likely as one in 10⁷ (n²/2⁶⁴). It is one call, so that it
// inlines.
func (t *table) hash(key string) uint64 { return strHash(key, &t.k) | 1 }

// strHash hashes s under the keys k with the Go runtime's string hash for
// machines without AES (runtime/hash64.go, after wyhash), which the runtime
// relies on against hash flooding. It calls nothing, so it needs no stack
// frame: about 40 instructions fewer than hash/maphash for a short key.
func strHash(s string, k *[4]uint64) uint64 {
	var a, b uint64
	seed, n := k[0], len(s)
	switch {
	case n > 16:
		p := s
		if n > 48 {
			seed1, seed2 := seed, seed
			for ; len(p) > 48; p = p[48:] {
				seed = mix(le64(p)^k[1], le64(p[8:])^seed)
				seed1 = mix(le64(p[16:])^k[2], le64(p[24:])^seed1)
				seed2 = mix(le64(p[32:])^k[3], le64(p[40:])^seed2)
			}
			seed ^= seed1 ^ seed2
		}
		for ; len(p) > 16; p = p[16:] {
			seed = mix(le64(p)^k[1], le64(p[8:])^seed)
		}
		// The last 16 bytes, which may overlap those hashed above.
		a, b = le64(s[n-16:]), le64(s[n-8:])
	case n >= 8:
		a, b = le64(s), le64(s[n-8:])
	case n >= 4:
		a, b = le32(s), le32(s[n-4:])
	case n > 0:
		a = uint64(s[0])<<16 | uint64(s[n>>1])<<8 | uint64(s[n-1])
	}
	return mix(0x1d8e4e27c47d124f^uint64(n), mix(a^k[1], b^seed))
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

// shard returns h's shard. The shift is masked to 63 (a shift of 64, for
// one shard, becomes 0, which the mask then zeroes) so that it compiles to
// one instruction.
func (t *table) shard(h uint64) *shard { return &t.shards[h>>(t.shift&63)&t.mask] }

// Limiter returns the limiter for rule, which shares the store's state for
// that rule (two Limiters for equal rules decide for the same keys). The
// rule is validated: errors wrap portero.ErrInvalidLimit or
// portero.ErrUnknownAlgorithm. The Limiter is safe for concurrent use and
// stops working (ErrClosed) when the store is closed.
func (s *Store) Limiter(rule portero.Rule) (*Limiter, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	t, err := s.table(rule)
	if err != nil {
		return nil, err
	}
	return &Limiter{t: t}, nil
}

var errClosed = fmt.Errorf("memstore: %w", portero.ErrClosed)

// Len returns the number of keys the store holds state for, summed over its
// rules. It locks every shard in turn, so it is meant for tests and metrics,
// not for every request.
func (s *Store) Len() int {
	n := 0
	s.tables.Range(func(_, v any) bool {
		t := v.(*table)
		for i := range t.shards {
			sh := &t.shards[i]
			sh.mu.Lock()
			n += sh.n + len(sh.logs)
			sh.mu.Unlock()
		}
		return true
	})
	return n
}

// Close stops the sweeper and releases the state. It waits for the sweeper
// to return or for ctx to end, whichever comes first. Calls after the first
// return an error wrapping portero.ErrClosed.
func (s *Store) Close(ctx context.Context) error {
	first := false
	s.closeOnce.Do(func() {
		first = true
		s.closed.Store(true)
		close(s.stop)
	})
	if !first {
		return errClosed
	}
	for _, done := range []chan struct{}{s.done, s.clockDone()} {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("memstore: close: %w", ctx.Err())
		}
	}
	s.tables.Clear()
	return nil
}

// sweeper drops expired state every interval until Close.
func (s *Store) sweeper() {
	defer close(s.done)
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.Sweep(s.clockTime())
		}
	}
}

// sweepChunk is how many slots the sweeper examines per lock hold, which
// bounds how long it keeps a shard from deciding.
const sweepChunk = 1024

// Sweep drops every state that has expired at now (returned to "full",
// which changes no decision) and the keys whose leases have all expired,
// and returns how many keys it dropped; the sweeper calls it, and so may a
// program that turned the sweeper off. It locks one shard at a time, for
// sweepChunk slots of an array (a sliding log's whole map at once).
func (s *Store) Sweep(now time.Time) int {
	ns := now.UnixNano()
	dropped := 0
	s.tables.Range(func(_, v any) bool {
		t := v.(*table)
		for i := range t.shards {
			sh := &t.shards[i]
			if t.log != nil {
				sh.mu.Lock()
				for h, l := range sh.logs {
					if t.log.Expiry(l) <= ns {
						delete(sh.logs, h)
						dropped++
					}
				}
				sh.mu.Unlock()
				continue
			}
			for from := 0; ; from += sweepChunk {
				sh.mu.Lock()
				a := sh.tab.Load()
				if a == nil || from >= a.size() {
					sh.mu.Unlock()
					break
				}
				dropped += sh.sweepFixed(from, from+sweepChunk, ns, t.dec)
				sh.mu.Unlock()
			}
		}
		return !s.closed.Load()
	})
	return dropped + s.sweepLeases(ns)
}

// AllowAll implements portero.Store: it decides every hit at now and counts
// them only if all are allowed. It locks every shard the hits touch, in a
// fixed order, so that concurrent calls are atomic with respect to each
// other and to the Limiters. The decisions are those of
// storetest.Reference: hits are decided in order, each seeing what the
// earlier ones of the call would leave; when the call is refused the
// decisions of the hits that would have passed alone still say Allowed.
// ctx is not consulted: a decision waits for nothing but the shard locks.
func (s *Store) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if len(hits) == 0 {
		return []portero.Decision{}, nil
	}
	if len(hits) == 1 && hits[0].MaxDelay <= 0 {
		// One hit is one decision: Limiter.AllowN's, lock-free where it can
		// be, which also checks the cost.
		h := hits[0]
		t, err := s.table(h.Rule)
		if err != nil {
			return nil, err
		}
		d, err := (&Limiter{t: t}).AllowN(ctx, h.Key, now, h.Cost)
		if err != nil {
			return nil, err
		}
		return []portero.Decision{d}, nil
	}
	var buf [4]pending
	work := buf[:0]
	if len(hits) > len(buf) {
		work = make([]pending, 0, len(hits))
	}
	for _, h := range hits {
		t, err := s.table(h.Rule)
		if err != nil {
			return nil, err
		}
		if h.Cost <= 0 || h.Cost > t.max {
			return nil, t.badCall(h.Cost)
		}
		hash := t.hash(h.Key)
		work = append(work, pending{t: t, h: hash, sh: t.shard(hash)})
	}
	// Lock each shard once, in (table, shard) order. The order is kept as
	// indices into work, not pointers: a slice of pointers that outgrew lbuf
	// would move work (and buf) to the heap on every call.
	var lbuf [4]int
	locks := lbuf[:0]
	for i := range work {
		locks = append(locks, i)
	}
	slices.SortFunc(locks, func(i, j int) int {
		a, b := &work[i], &work[j]
		return cmp.Or(cmp.Compare(a.t.id, b.t.id), cmp.Compare(a.h>>a.t.shift, b.h>>b.t.shift))
	})
	locks = slices.CompactFunc(locks, func(i, j int) bool { return work[i].sh == work[j].sh })
	for _, i := range locks {
		work[i].sh.mu.Lock()
	}
	defer func() {
		for _, i := range locks {
			work[i].sh.mu.Unlock()
		}
	}()

	ns := now.UnixNano()
	out := make([]portero.Decision, len(hits))
	all := true
	for i := range work {
		p := &work[i]
		// The first hit on a (rule, key) carries the state; later ones on
		// the same pair use and update it.
		first := p
		for j := range i {
			if work[j].t == p.t && work[j].h == p.h {
				first = &work[j]
				break
			}
		}
		if first == p {
			p.load()
		}
		cost := hits[i].Cost
		var d portero.Decision
		if p.t.log != nil {
			d = p.t.log.DecideAfter(first.log, ns, first.cost, cost)
		} else {
			var st algorithm.State
			st, d = algorithm.DecideWithin(p.t.dec, first.s, first.found, ns, cost, hits[i].MaxDelay)
			if d.Allowed {
				first.s, first.found = st, true
			}
		}
		if d.Allowed {
			first.cost += cost
		}
		out[i], all = d, all && d.Allowed
	}
	// Write the states found in the arrays first (the one-word ones taken
	// are given back, committed or as they were): an insert below may
	// rebuild an array, which would leave their slot indices pointing into
	// the old one, and must not copy a retired word.
	for i := range work {
		p := &work[i]
		switch {
		case p.a == nil:
		case all && p.cost > 0:
			p.a.set(p.i, p.s)
		case p.taken:
			p.a.set(p.i, algorithm.State{A: p.orig})
		}
	}
	if all {
		for i := range work {
			if p := &work[i]; p.cost > 0 && p.a == nil {
				p.commit(ns)
			}
		}
	}
	return out, nil
}

// pending is one hit of an AllowAll call while its shard is locked.
type pending struct {
	t     *table
	h     uint64
	sh    *shard
	s     algorithm.State // fixed-size: the state so far in this call
	found bool
	log   *algorithm.Log // sliding log: the log (possibly new)
	cost  int64          // admitted so far in this call on this (rule, key)
	// A one-word state found is taken for the call (its word retired, so
	// that lock-free decisions wait for the lock) and set again at the end.
	a     *array
	i     int
	taken bool
	orig  int64 // the word as it was
}

func (p *pending) load() {
	if p.t.log != nil {
		if p.log = p.sh.logs[p.h]; p.log == nil {
			p.log = new(algorithm.Log)
		}
		return
	}
	a, i := p.sh.find(p.h)
	if i < 0 {
		return
	}
	p.found, p.a, p.i = true, a, i
	if p.t.word == nil {
		p.s = a.state(i)
		return
	}
	// Under the lock the word is not retired; the swap makes every
	// compare-and-swap begun before it fail.
	p.orig = int64(atomic.SwapUint64(&a.w[i+1], retiredWord))
	p.s, p.taken = algorithm.State{A: p.orig}, true
}

// commit records a sliding log's units or inserts a new key's state.
func (p *pending) commit(now int64) {
	if p.t.log != nil {
		p.t.log.Record(p.log, now, p.cost)
		if _, ok := p.sh.logs[p.h]; !ok {
			if len(p.sh.logs) >= p.sh.max {
				p.sh.evictLog(now, p.t.log)
			}
			p.sh.logs[p.h] = p.log
		}
		return
	}
	p.sh.insert(p.h, p.s, now, p.t.dec)
}

// ErrQueueFull reports that a leaky-queue limiter dropped a request because
// its queue had no room. Wait returns errors that wrap it.
var ErrQueueFull = errors.New("queue full")
