package memstore

import (
	"context"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Peek implements portero.Store.Peek (algorithm.Look): the fixed-size
// state is only read, and a sliding log is only pruned of its expired
// entries, as a refused request does. ctx is not consulted.
func (s *Store) Peek(_ context.Context, rule portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	if s.closed.Load() {
		return portero.Decision{}, errClosed
	}
	t, err := s.table(rule)
	if err != nil {
		return portero.Decision{}, err
	}
	if cost <= 0 || cost > t.max {
		return portero.Decision{}, t.badCall(cost)
	}
	h := t.hash(key)
	sh := t.shard(h)
	ns := now.UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t.log != nil {
		l := sh.logs[h]
		if l == nil {
			l = new(algorithm.Log) // a fresh log, not kept
		}
		return t.log.Look(l, ns, cost), nil // records nothing
	}
	var st algorithm.State
	found := false
	if a, i := sh.find(h); i >= 0 {
		st, found = a.state(i), true
	}
	return algorithm.Look(t.dec, st, found, ns, cost), nil
}

// Reset forgets key's state under rule, so that its next request is decided
// as the first of a fresh key; resetting a key the store does not hold is
// not an error. Two keys whose hashes collide share one state (see the
// package documentation), so resetting one resets both. Errors wrap
// portero.ErrClosed, portero.ErrInvalidLimit or portero.ErrUnknownAlgorithm.
// ctx is not consulted.
func (s *Store) Reset(_ context.Context, rule portero.Rule, key string) error {
	if s.closed.Load() {
		return errClosed
	}
	t, err := s.table(rule)
	if err != nil {
		return err
	}
	h := t.hash(key)
	sh := t.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t.log != nil {
		delete(sh.logs, h)
		return nil
	}
	if a, i := sh.find(h); i >= 0 {
		sh.deleteAt(a, i)
	}
	return nil
}
