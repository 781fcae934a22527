package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/portero-rl/portero"
)

// Keeper renews the leases of one admitted request until Release, for every
// door that holds a request while it runs: every TTL/3 of the shortest
// lease, on a time.AfterFunc timer (no goroutine waits), so that a crashed
// instance leaks its slots for at most a TTL. It is safe for concurrent
// use; a nil *Keeper keeps nothing.
type Keeper struct {
	ctx     context.Context // the request's, without its cancellation
	held    []Held
	now     func() time.Time
	onError func(error)
	every   time.Duration

	mu      sync.Mutex
	done    bool
	lost    []bool
	renewal *time.Timer
}

// Keep copies held (a verdict's Held) into a Keeper that renews them at the
// instants now returns, until Release; nil when held is empty. ctx's values
// reach the store, its end does not stop the renewals. onError, when not
// nil, receives the errors of renewals (portero.ErrLeaseLost: that lease
// is not renewed again) and releases.
func Keep(ctx context.Context, held []Held, now func() time.Time, onError func(error)) *Keeper {
	if len(held) == 0 {
		return nil
	}
	k := &Keeper{ctx: context.WithoutCancel(ctx), held: append([]Held(nil), held...), now: now, onError: onError, lost: make([]bool, len(held))}
	for _, h := range held {
		if e := h.Rule.Concurrency.LeaseTTL() / 3; k.every == 0 || e < k.every {
			k.every = e
		}
	}
	k.mu.Lock() // renew may run before AfterFunc returns
	k.renewal = time.AfterFunc(k.every, k.renew)
	k.mu.Unlock()
	return k
}

func (k *Keeper) renew() {
	for i, h := range k.held {
		k.mu.Lock()
		skip := k.done || k.lost[i]
		k.mu.Unlock()
		if skip {
			continue
		}
		err := h.Lease.Renew(k.ctx, k.now())
		if err == nil {
			continue
		}
		if errors.Is(err, portero.ErrLeaseLost) {
			k.mu.Lock()
			k.lost[i] = true // gone: renewing it again would fail again
			k.mu.Unlock()
		}
		if k.onError != nil {
			k.onError(err)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.done {
		k.renewal.Reset(k.every)
	}
}

// Release stops the renewals and gives every lease back, once; it returns
// them (nil on a later call), for a door that wakes waiters for the slots.
func (k *Keeper) Release() []Held {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	if k.done {
		k.mu.Unlock()
		return nil
	}
	k.done = true
	k.renewal.Stop()
	k.mu.Unlock()
	Release(k.ctx, k.held, k.onError)
	return k.held
}

// Release gives back every lease in held, even when ctx is done (the
// client left), passing the errors to onError when it is not nil.
func Release(ctx context.Context, held []Held, onError func(error)) {
	ctx = context.WithoutCancel(ctx)
	for _, h := range held {
		if err := h.Lease.Release(ctx); err != nil && onError != nil {
			onError(err)
		}
	}
}
