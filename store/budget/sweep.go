package budget

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
)

// Peek implements portero.Store: a leased rule's hit is allowed when its
// batch covers it, refused when the batch is short and the shared state
// was found short of what it lacks, and otherwise what the shared state
// answers for the units the batch lacks; Remaining counts the batch's
// units too.
func (s *Store) Peek(ctx context.Context, rule portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	if s.closed.Load() {
		return portero.Decision{}, errClosed
	}
	var b *batch
	if rule.Budget > 0 {
		if e, ok := s.keys.Load(entryKey{rule, key}); ok {
			b = e.(*entry).cur.Load()
		}
	}
	ns := now.UnixNano()
	if b == nil || ns >= b.until {
		return s.shared.Peek(ctx, rule, key, now, cost)
	}
	left := b.left.Load()
	switch {
	case left >= cost:
		return b.decision(ns, true), nil
	case b.short > 0 && ns < b.known && cost-left >= b.short:
		return b.decision(ns, false), nil
	}
	d, err := s.shared.Peek(ctx, rule, key, now, cost-left)
	d.Remaining += left
	return d, err
}

// Adjust implements portero.Adjuster: settlements go to the shared state
// (a refund of a leased hit's units gives them back there).
func (s *Store) Adjust(ctx context.Context, now time.Time, adj []portero.Adjustment) error {
	if s.adjust == nil {
		return fmt.Errorf("budget: %T: %w: the shared store cannot settle", s.shared, portero.ErrNotAdjustable)
	}
	return s.adjust.Adjust(ctx, now, adj)
}

// Sweep, at instant now, gives back to the shared state what the batches
// of windows idle for their lifetime T still hold, counts what ended
// unspent, and forgets the keys idle for T. The sweeper calls it; so may a
// program that turned the sweeper off. An error is the give-back's (those
// units are lost, never admitted).
func (s *Store) Sweep(ctx context.Context, now time.Time) error {
	return s.sweep(ctx, now, false)
}

// sweep is Sweep, or with all the give-back of every window's batch still
// in its window (Close).
func (s *Store) sweep(ctx context.Context, now time.Time, all bool) error {
	ns := now.UnixNano()
	var adj []portero.Adjustment
	s.keys.Range(func(k, v any) bool {
		e, key := v.(*entry), k.(entryKey)
		b := e.cur.Load()
		if b == nil {
			return true
		}
		switch {
		case ns >= b.until:
			s.expired.Add(uint64(b.left.Swap(0)))
		case b.idle > 0 && (all || ns >= b.idle):
			if u := b.left.Swap(0); u > 0 {
				adj = append(adj, portero.Adjustment{Rule: key.rule, Key: key.key, Delta: -u, At: time.Unix(0, b.at)})
			}
		}
		if ns >= b.until || ns >= b.at+int64(key.rule.BudgetLifetime()) {
			s.forget(key, e, b)
		}
		return true
	})
	if len(adj) == 0 {
		return nil
	}
	var units uint64
	for _, a := range adj {
		units += uint64(-a.Delta)
	}
	if s.adjust == nil {
		s.expired.Add(units)
		return nil
	}
	s.calls.Add(uint64(len(adj)))
	if err := s.adjust.Adjust(ctx, now, adj); err != nil {
		s.expired.Add(units)
		return fmt.Errorf("budget: giving back %d units: %w", units, err)
	}
	s.returned.Add(units)
	return nil
}

// forget drops key's entry when its batch b is still current, empty, and
// no take is in flight.
func (s *Store) forget(key entryKey, e *entry, b *batch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fill != nil || e.cur.Load() != b || b.left.Load() > 0 {
		return
	}
	e.dead = true
	s.hits.Add(uint64(b.hits.Load()))
	s.keys.Delete(key)
	s.n.Add(-1)
}

// sweeper calls Sweep every interval until Close.
func (s *Store) sweeper(every time.Duration) {
	defer close(s.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			_ = s.Sweep(ctx, s.now()) // what it could not give back is counted as expired
			cancel()
		}
	}
}

// Close gives back what the batches of windows hold (a draining instance
// leaves its units to the others), stops the sweeper and closes the
// shared store; a bucket's units left it at the take and are not given
// back. A second Close returns an error wrapping portero.ErrClosed.
func (s *Store) Close(ctx context.Context) error {
	first := false
	s.closeOnce.Do(func() { first = true; s.closed.Store(true); close(s.stop) })
	if !first {
		return errClosed
	}
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	err := s.sweep(ctx, s.now(), true)
	return errors.Join(err, s.shared.Close(ctx))
}

// Acquire implements portero.LeaseStore when the shared store does: the
// leases of concurrency limits are the shared store's own.
func (s *Store) Acquire(ctx context.Context, now time.Time, rule portero.ConcurrencyRule, key string) (portero.Lease, portero.Decision, error) {
	ls, ok := s.shared.(portero.LeaseStore)
	if !ok {
		return nil, portero.Decision{}, fmt.Errorf("budget: %T keeps no concurrency leases", s.shared)
	}
	return ls.Acquire(ctx, now, rule, key)
}

// Reset forgets key's state under rule in the shared store, when it can
// (the admin's DELETE /api/keys), with what this instance's batch of it
// holds.
func (s *Store) Reset(ctx context.Context, rule portero.Rule, key string) error {
	rs, ok := s.shared.(interface {
		Reset(context.Context, portero.Rule, string) error
	})
	if !ok {
		return fmt.Errorf("budget: %T cannot reset a key", s.shared)
	}
	if e, ok := s.keys.Load(entryKey{rule, key}); ok {
		if b := e.(*entry).cur.Load(); b != nil {
			b.left.Store(0)
		}
	}
	return rs.Reset(ctx, rule, key)
}
