package memstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Limiter decides for the keys of one rule in a Store. Get one from
// Store.Limiter; it is safe for concurrent use and starts no goroutines.
type Limiter struct {
	t *table
}

var _ portero.Limiter = (*Limiter)(nil)

// Rule returns the rule the limiter enforces.
func (l *Limiter) Rule() portero.Rule { return l.t.rule }

// Allow is AllowN with cost 1 at the store's clock (Store.Now, which is
// Config.Now or the store's monotonic clock).
func (l *Limiter) Allow(_ context.Context, key string) (portero.Decision, error) {
	return l.t.allow(key, time.Time{}, 1, true)
}

// AllowN implements portero.Limiter: it decides a request of the given cost
// (in the rule's units) from key at now and counts it if allowed. For a
// leaky-queue rule an allowed request is queued: Decision.Delay is how long
// it waits before it departs, and the caller is expected to wait that long
// (Wait does). Errors wrap portero.ErrInvalidCost,
// portero.ErrCostExceedsLimit or portero.ErrClosed. ctx is not consulted: a
// decision waits for nothing but, at most, one shard lock. On a key the
// store already holds it allocates nothing, and for GCRA and the leaky
// queue it takes no lock.
func (l *Limiter) AllowN(_ context.Context, key string, now time.Time, cost int64) (portero.Decision, error) {
	return l.t.allow(key, now, cost, false)
}

// allow is AllowN at now, or at the store's clock when clock is set. Allow
// and AllowN are small enough to be inlined into their callers, so that
// both call this directly: a layer between them and the decision that
// passed a Decision through would cost a quarter of a hot-key decision.
// The whole of the common case is here, with no call but the hash and the
// clock's. For a one-word algorithm and a key the array holds, the
// decision is a compare-and-swap of the key's state word, without the lock
// (table.go).
//
// The key is hashed and its slot found before the clock is read: the read
// (an ordered TSC read, see clock.go) waits for the instructions before
// it, but what comes after it waits for the read, so work that does not
// need the instant is cheaper before it (bench/'s TestHotKeyCPU measures
// the clock-read decision). The state word itself is loaded after the read.
func (t *table) allow(key string, now time.Time, cost int64, clock bool) (d portero.Decision, err error) {
	if cost <= 0 || cost > t.max || t.store.closed.Load() {
		return d, t.badCall(cost)
	}
	h := t.hash(key)
	sh := t.shard(h)
	var p *uint64
	if t.word != nil {
		p = sh.stateWord(h)
	}
	var ns int64
	if s := t.store; !clock {
		ns = now.UnixNano()
	} else if s.monotonic {
		ns = s.monoBase + nanotime() // nowNS's common case, without its frame
	} else {
		ns = s.nowNS()
	}
	if p != nil {
		// A refusal writes nothing; a failed swap lost a race with
		// another decision on the key: decide again. A word that is
		// retired (the key deleted, moved or taken by AllowAll) sends
		// the decision to the lock.
		if g := t.gcra; g != nil {
			// Scalars only until the decision is written, in
			// place, into the named result (see
			// algorithm.GCRA.SetDecision).
			for {
				v := int64(atomic.LoadUint64(p))
				if v == retired {
					break
				}
				nv, retry := g.Next(v, true, ns, cost)
				if retry != 0 || atomic.CompareAndSwapUint64(p, uint64(v), uint64(word(nv))) {
					g.SetDecision(&d, nv-ns, retry)
					return
				}
			}
		} else {
			for {
				v := int64(atomic.LoadUint64(p))
				if v == retired {
					break
				}
				nv, wd := t.word.DecideWord(v, true, ns, cost)
				if !wd.Allowed || atomic.CompareAndSwapUint64(p, uint64(v), uint64(word(nv))) {
					return wd, nil
				}
			}
		}
	}
	return t.decideLocked(sh, h, ns, cost), nil
}

// badCall returns the error for a cost out of range or a closed store.
func (t *table) badCall(cost int64) error {
	if err := algorithm.CheckCost(cost, t.max); err != nil {
		return fmt.Errorf("rule %q: %w", t.rule.Name, err)
	}
	return errClosed
}

// decideLocked decides one request under the shard lock.
func (t *table) decideLocked(sh *shard, h uint64, now, cost int64) portero.Decision {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t.log != nil {
		return t.decideLog(sh, h, now, cost)
	}
	if a, i := sh.find(h); i >= 0 {
		if t.word != nil {
			// Under the lock the word is not retired, but lock-free
			// decisions may still change it.
			for {
				v := int64(atomic.LoadUint64(&a.w[i+1]))
				nv, d := t.word.DecideWord(v, true, now, cost)
				if !d.Allowed || atomic.CompareAndSwapUint64(&a.w[i+1], uint64(v), uint64(word(nv))) {
					return d
				}
			}
		}
		s, d := t.dec.Decide(a.state(i), true, now, cost)
		if d.Allowed {
			a.set(i, s)
		}
		return d
	}
	s, d := t.dec.Decide(algorithm.State{}, false, now, cost)
	if d.Allowed {
		sh.insert(h, s, now, t.dec)
	}
	return d
}

func (t *table) decideLog(sh *shard, h uint64, now, cost int64) portero.Decision {
	l := sh.logs[h]
	if l != nil {
		d := t.log.Decide(l, now, cost)
		if d.Allowed {
			t.log.Record(l, now, cost)
		}
		return d
	}
	l = new(algorithm.Log)
	d := t.log.Decide(l, now, cost)
	if d.Allowed {
		t.log.Record(l, now, cost)
		if len(sh.logs) >= sh.max {
			sh.evictLog(now, t.log)
		}
		sh.logs[h] = l
	}
	return d
}

// Wait is WaitN with cost 1.
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until a request of the given cost from key is admitted, on
// the store's clock (Store.Now): portero.WaitN, whose errors it returns,
// and ErrClosed once the store is closed. For a leaky-queue rule it takes a
// place in key's queue and sleeps until the request departs: a full queue
// is an error wrapping ErrQueueFull, and when ctx ends first, or its
// deadline comes before the departure, the place is given back as
// Store.Adjust gives it.
func (l *Limiter) WaitN(ctx context.Context, key string, cost int64) error {
	t := l.t
	if t.rule.Algorithm != portero.LeakyQueue {
		_, err := portero.WaitN(ctx, l, key, cost, t.store.Now)
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ns := t.store.nowNS()
	if cost <= 0 || cost > t.max || t.store.closed.Load() {
		return t.badCall(cost)
	}
	d, err := l.AllowN(ctx, key, time.Unix(0, ns), cost)
	if err != nil {
		return err
	}
	if !d.Allowed {
		return fmt.Errorf("memstore: rule %q: %w: retry after %v", t.rule.Name, ErrQueueFull, d.RetryAfter)
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.Delay {
		t.adjust(key, t.store.nowNS(), ns, -cost)
		return fmt.Errorf("memstore: rule %q: departure in %v is after the deadline: %w", t.rule.Name, d.Delay, context.DeadlineExceeded)
	}
	timer := time.NewTimer(d.Delay)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		t.adjust(key, t.store.nowNS(), ns, -cost)
		return ctx.Err()
	case <-t.store.stop:
		return errClosed
	}
}

// Done returns a channel that is closed when the store is closed, so that
// portero.WaitN ends its sleep then.
func (l *Limiter) Done() <-chan struct{} { return l.t.store.stop }
