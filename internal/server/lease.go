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

// leased is the store of one configuration, counting the calls in flight
// in it, so that a reload that replaces the store closes the old one as
// soon as the requests holding it are done.
//
// A request takes its store when it begins; a call it makes after a
// reload retired that store goes to the store that replaced it, never to
// a closed one, so retiring never waits for, nor fails, a request. A call
// first counts itself in, then looks at retired; retire sets retired, then
// looks at the count. Whichever comes second sees the other (Go's atomics
// are sequentially consistent), so no call runs in a store after it is
// closed.
type leased struct {
	portero.Store
	inflight atomic.Int64
	retired  atomic.Bool
	next     atomic.Pointer[leased]
	idleOnce sync.Once
	idle     chan struct{} // closed once retired with no call in flight
}

func newLeased(st portero.Store) *leased { return &leased{Store: st, idle: make(chan struct{})} }

// enter counts a call in and reports whether it runs in l; when it does
// not, l is retired and the call goes to l.next.
func (l *leased) enter() bool {
	l.inflight.Add(1)
	if l.retired.Load() {
		l.release()
		return false
	}
	return true
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

// AllowAll implements portero.Store.
func (l *leased) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	if !l.enter() {
		return l.next.Load().AllowAll(ctx, now, hits)
	}
	defer l.release()
	return l.Store.AllowAll(ctx, now, hits)
}

// Peek implements portero.Store.
func (l *leased) Peek(ctx context.Context, rule portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	if !l.enter() {
		return l.next.Load().Peek(ctx, rule, key, now, cost)
	}
	defer l.release()
	return l.Store.Peek(ctx, rule, key, now, cost)
}

// Adjust implements portero.Adjuster when the store does (a settlement
// may come after a reload).
func (l *leased) Adjust(ctx context.Context, now time.Time, adj []portero.Adjustment) error {
	if !l.enter() {
		return l.next.Load().Adjust(ctx, now, adj)
	}
	defer l.release()
	a, ok := l.Store.(portero.Adjuster)
	if !ok {
		return fmt.Errorf("%T: %w: the store cannot settle", l.Store, portero.ErrNotAdjustable)
	}
	return a.Adjust(ctx, now, adj)
}

// Acquire implements portero.LeaseStore when the store does. A lease it
// grants counts as a call in flight until it is released, so that a
// replaced store stays open for the renewals and releases of the leases
// it granted.
func (l *leased) Acquire(ctx context.Context, now time.Time, rule portero.ConcurrencyRule, key string) (portero.Lease, portero.Decision, error) {
	ls, ok := l.Store.(portero.LeaseStore)
	if !ok {
		return nil, portero.Decision{}, errors.New("server: the store keeps no concurrency leases")
	}
	if !l.enter() {
		return l.next.Load().Acquire(ctx, now, rule, key)
	}
	lease, d, err := ls.Acquire(ctx, now, rule, key)
	if lease == nil {
		l.release()
		return nil, d, err
	}
	return &heldLease{Lease: lease, store: l}, d, err
}

// heldLease is a lease of a leased store, which stays open until the
// lease is released.
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
