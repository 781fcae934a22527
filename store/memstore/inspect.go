package memstore

import (
	"context"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Peek returns the decision that a request of cost 1 from key under rule
// would get at now, without counting it: the Decision AllowN would return,
// with Allowed saying whether that request would pass and Remaining what
// it would leave. A key the store holds no state for answers as a fresh one.
// Nothing observable changes: the fixed-size state is only read, and a
// sliding log is pruned of the entries that have expired at now and its
// latest instant moved to now, as a refused request does (which changes no
// decision while time goes forward), but nothing is logged. Errors wrap
// portero.ErrClosed, portero.ErrInvalidLimit or portero.ErrUnknownAlgorithm.
// ctx is not consulted.
//
// Peek and Reset serve the gateway's admin API (GET and DELETE on
// /api/keys), for an operator inspecting or forgiving one client.
func (s *Store) Peek(_ context.Context, rule portero.Rule, key string, now time.Time) (portero.Decision, error) {
	if s.closed.Load() {
		return portero.Decision{}, errClosed
	}
	t, err := s.table(rule)
	if err != nil {
		return portero.Decision{}, err
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
		return t.log.Decide(l, ns, 1), nil // records nothing
	}
	var st algorithm.State
	found := false
	if a, i := sh.find(h); i >= 0 {
		st, found = a.state(i), true
	}
	_, d := t.dec.Decide(st, found, ns, 1) // the new state is dropped
	return d, nil
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
