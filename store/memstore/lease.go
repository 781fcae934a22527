package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Concurrency leases: Store implements portero.LeaseStore. The leases of a
// rule live under its name (so a rule whose Max or TTL changes keeps the
// leases held), in shards with one mutex each; a key's leases are an
// algorithm.Leases. A lease that is neither released nor renewed expires
// after the rule's TTL, as in Redis, and the sweeper drops the keys left
// with no lease or only expired ones. Config.MaxKeys caps
// the keys with leases per rule, like the keys of a rate rule: memory
// follows the requests in flight, never what clients send.

// leaseTables holds the store's concurrency rules by name.
type leaseTables struct {
	tables sync.Map // rule name → *leaseTable
	seq    atomic.Uint64
}

type leaseTable struct {
	seed   maphash.Seed
	shift  uint
	mask   uint64
	shards []leaseShard
}

type leaseShard struct {
	mu   sync.Mutex
	max  int
	sets map[string]*algorithm.Leases[uint64]
}

var _ portero.LeaseStore = (*Store)(nil)

func (s *Store) leaseTable(name string) *leaseTable {
	if t, ok := s.leases.tables.Load(name); ok {
		return t.(*leaseTable)
	}
	t := &leaseTable{seed: maphash.MakeSeed(), shift: 64 - s.shardBits, mask: 1<<s.shardBits - 1, shards: make([]leaseShard, 1<<s.shardBits)}
	for i := range t.shards {
		t.shards[i] = leaseShard{max: s.perShard, sets: map[string]*algorithm.Leases[uint64]{}}
	}
	actual, _ := s.leases.tables.LoadOrStore(name, t)
	return actual.(*leaseTable)
}

// Acquire implements portero.LeaseStore: it takes one slot of rule under key
// at now when fewer than rule.Max unexpired leases are held there. ctx is
// not consulted. Errors wrap portero.ErrInvalidLimit (a bad rule),
// portero.ErrClosed, or portero.ErrStoreUnavailable when the rule already
// has leases under Config.MaxKeys keys (an HTTP caller answers 503: the
// store, not the client, is out of room).
func (s *Store) Acquire(_ context.Context, now time.Time, rule portero.ConcurrencyRule, key string) (portero.Lease, portero.Decision, error) {
	if s.closed.Load() {
		return nil, portero.Decision{}, errClosed
	}
	if err := rule.Validate(); err != nil {
		return nil, portero.Decision{}, fmt.Errorf("memstore: %w", err)
	}
	t := s.leaseTable(rule.Name)
	sh := &t.shards[maphash.String(t.seed, key)>>t.shift&t.mask]
	ns := now.UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := sh.sets[key]
	if set == nil {
		if len(sh.sets) >= sh.max && sh.sweep(ns) == 0 {
			return nil, portero.Decision{Limit: rule.Max}, fmt.Errorf("memstore: concurrency rule %q: %w: leases held under %d keys, the most this store keeps (Config.MaxKeys)", rule.Name, portero.ErrStoreUnavailable, len(sh.sets)<<s.shardBits)
		}
		set = new(algorithm.Leases[uint64])
		sh.sets[key] = set
	}
	id := s.leases.seq.Add(1)
	d := set.Acquire(id, ns, rule.LeaseTTL(), rule.Max)
	if !d.Allowed {
		return nil, d, nil
	}
	return &lease{sh: sh, key: key, id: id, ttl: rule.LeaseTTL(), store: s}, d, nil
}

// sweep drops the keys whose leases have all expired at now and returns
// how many it dropped. The shard is locked.
func (sh *leaseShard) sweep(now int64) int {
	n := 0
	for k, set := range sh.sets {
		if set.Expire(now) == 0 {
			delete(sh.sets, k)
			n++
		}
	}
	return n
}

// sweepLeases drops, at now, the keys left with only expired leases; Sweep
// calls it.
func (s *Store) sweepLeases(now int64) int {
	n := 0
	s.leases.tables.Range(func(_, v any) bool {
		t := v.(*leaseTable)
		for i := range t.shards {
			sh := &t.shards[i]
			sh.mu.Lock()
			n += sh.sweep(now)
			sh.mu.Unlock()
		}
		return !s.closed.Load()
	})
	return n
}

// lease is one slot held in a memory store.
type lease struct {
	sh    *leaseShard
	key   string
	id    uint64
	ttl   time.Duration
	store *Store
}

// Renew implements portero.Lease. After Close it returns an error wrapping
// portero.ErrClosed.
func (l *lease) Renew(_ context.Context, now time.Time) error {
	if l.store.closed.Load() {
		return errClosed
	}
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	set := l.sh.sets[l.key]
	ok := set != nil && set.Renew(l.id, now.UnixNano(), l.ttl)
	if set != nil && set.Len() == 0 {
		delete(l.sh.sets, l.key)
	}
	if !ok {
		return fmt.Errorf("memstore: lease on %q: %w", l.key, portero.ErrLeaseLost)
	}
	return nil
}

// Release implements portero.Lease; it never fails. A key left without
// leases keeps its (empty) set until the sweep, or until a new key needs
// its room, so that a client's requests one after another allocate nothing.
func (l *lease) Release(context.Context) error {
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	if set := l.sh.sets[l.key]; set != nil {
		set.Release(l.id)
	}
	return nil
}
