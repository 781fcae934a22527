package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
)

// leased is the store of one configuration generation, counting the calls
// in flight in it, so that a reload that replaces the store can close the
// old one as soon as the requests holding it are done — not at exit, which
// leaked Redis connections, files and memstore sweepers for every reload.
//
// A request took its store when it began, from the configuration it
// loaded; it may call AllowAll (or Peek) after a reload retired that store. Such a
// late call goes to the store that replaced it (the one the request would
// have got a moment later), never to a closed one: so retiring never waits
// for, nor fails, a request. The check is one counter: a call first counts
// itself in, then looks at retired; retire sets retired, then looks at the
// count. Whichever comes second sees the other (Go's atomics are
// sequentially consistent), so no call runs in a store after it is closed.
type leased struct {
	portero.Store
	inflight atomic.Int64
	retired  atomic.Bool
	next     atomic.Pointer[leased]
	idleOnce sync.Once
	idle     chan struct{} // closed once retired with no call in flight
}

func newLeased(st portero.Store) *leased { return &leased{Store: st, idle: make(chan struct{})} }

// AllowAll implements portero.Store.
func (l *leased) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	l.inflight.Add(1)
	if l.retired.Load() {
		l.release()
		return l.next.Load().AllowAll(ctx, now, hits)
	}
	defer l.release()
	return l.Store.AllowAll(ctx, now, hits)
}

// Peek implements portero.Store, leased as AllowAll is (the engine peeks
// for check-only hits and for hits that can never pass).
func (l *leased) Peek(ctx context.Context, rule portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	l.inflight.Add(1)
	if l.retired.Load() {
		l.release()
		return l.next.Load().Peek(ctx, rule, key, now, cost)
	}
	defer l.release()
	return l.Store.Peek(ctx, rule, key, now, cost)
}

// Acquire implements portero.LeaseStore when the store does (memstore and
// redisstore do), leased as AllowAll is — and a lease it grants counts as a
// call in flight until it is released, so that a reload that replaces the
// store keeps it open for the requests holding its leases (their renewals
// and releases reach it) and closes it once the last is given back. A late
// Acquire goes to the store that replaced it.
func (l *leased) Acquire(ctx context.Context, now time.Time, rule portero.ConcurrencyRule, key string) (portero.Lease, portero.Decision, error) {
	ls, ok := l.Store.(portero.LeaseStore)
	if !ok {
		return nil, portero.Decision{}, errors.New("server: the store keeps no concurrency leases")
	}
	l.inflight.Add(1)
	if l.retired.Load() {
		l.release()
		return l.next.Load().Acquire(ctx, now, rule, key)
	}
	lease, d, err := ls.Acquire(ctx, now, rule, key)
	if lease == nil {
		l.release()
		return nil, d, err
	}
	return &heldLease{Lease: lease, store: l}, d, err
}

// heldLease is a lease of a leased store: the store stays open until it is
// released.
type heldLease struct {
	portero.Lease
	store *leased
	once  sync.Once
}

// Release implements portero.Lease.
func (h *heldLease) Release(ctx context.Context) error {
	err := h.Lease.Release(ctx)
	h.once.Do(h.store.release)
	return err
}

func (l *leased) release() {
	if l.inflight.Add(-1) == 0 && l.retired.Load() {
		l.idleOnce.Do(func() { close(l.idle) })
	}
}

// retire hands later calls to next and returns a channel closed once no
// call is in flight in l, when l.Store may be closed.
func (l *leased) retire(next *leased) <-chan struct{} {
	l.next.Store(next)
	l.retired.Store(true)
	if l.inflight.Load() == 0 {
		l.idleOnce.Do(func() { close(l.idle) })
	}
	return l.idle
}

// Adjust implements portero.Adjuster when the store does, leased as
// AllowAll is (the engine settles after responses, which may end after a
// reload).
func (l *leased) Adjust(ctx context.Context, now time.Time, adj []portero.Adjustment) error {
	l.inflight.Add(1)
	if l.retired.Load() {
		l.release()
		return l.next.Load().Adjust(ctx, now, adj)
	}
	defer l.release()
	a, ok := l.Store.(portero.Adjuster)
	if !ok {
		return fmt.Errorf("%T: %w: the store cannot settle", l.Store, portero.ErrNotAdjustable)
	}
	return a.Adjust(ctx, now, adj)
}
