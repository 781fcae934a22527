package budget

import (
	"context"
	"math"
	"time"

	"github.com/portero-rl/portero"
)

// refill takes a new batch for h, unless a take of e is in flight: then it
// waits for it and reports mine false, for the caller to try the new
// batch. The hit that takes decides itself from what it took (with what
// the old batch still held), so that it never waits twice: mine true,
// with its decision and, when admitted, the new batch.
func (s *Store) refill(ctx context.Context, e *entry, now time.Time, h *portero.Hit) (*batch, portero.Decision, bool, error) {
	e.mu.Lock()
	if f := e.fill; f != nil {
		e.mu.Unlock()
		select {
		case <-f:
			return nil, portero.Decision{}, false, nil
		case <-ctx.Done():
			return nil, portero.Decision{}, true, ctx.Err()
		}
	}
	f := make(chan struct{})
	e.fill = f
	want := e.want
	if e.dead {
		want = 1
	}
	e.mu.Unlock()
	ns := now.UnixNano()
	old := e.cur.Load()
	var held int64 // what the old batch still held, now this hit's
	if old != nil {
		held = old.left.Swap(0)
		if ns >= old.until {
			s.expired.Add(uint64(held))
			held = 0
		}
	}
	nb, d, err := s.take(ctx, e, old, now, h, held, max(want, h.Cost))
	e.mu.Lock()
	if err != nil {
		if old != nil {
			old.left.Add(held)
		}
	} else if nb != old {
		if old != nil {
			s.hits.Add(uint64(old.hits.Load()))
		}
		e.cur.Store(nb)
		if nb.short == 0 {
			e.want = nextWant(old, held, nb.at, want, h.Rule.Budget)
		}
	}
	e.fill = nil
	e.mu.Unlock()
	close(f)
	if err != nil || !d.Allowed {
		return nil, d, true, err
	}
	return nb, d, true, nil
}

// take asks the shared store for the units h lacks beyond held (up to
// want) and returns the batch to publish and h's decision from it. A hit
// that held covers costs no call.
func (s *Store) take(ctx context.Context, e *entry, old *batch, now time.Time, h *portero.Hit, held, want int64) (*batch, portero.Decision, error) {
	ns := now.UnixNano()
	if held >= h.Cost { // units put back meanwhile (a refused call's)
		old.left.Add(held - h.Cost)
		old.hits.Add(1)
		return old, old.decision(ns, true), nil
	}
	need := h.Cost - held
	s.calls.Add(1)
	took, dec, err := s.taker.Take(ctx, now, h.Rule, h.Key, need, max(want-held, need))
	if err != nil {
		return nil, portero.Decision{}, err
	}
	nb := &batch{at: ns, dec: dec}
	if took == 0 {
		// Nothing to take until RetryAfter, as far as this instance knows:
		// later hits needing as much are refused from memory for at most
		// the Budget interval (units given back elsewhere may come
		// sooner). What the old batch held stays spendable meanwhile.
		s.refusals.Add(1)
		nb.short, nb.known = need, ns+int64(min(dec.RetryAfter, h.Rule.Budget))
		nb.until = nb.known
		if held > 0 {
			nb.until, nb.idle = old.until, old.idle
		}
		nb.left.Store(held)
		nb.given = held
		return nb, nb.decision(ns, false), nil
	}
	s.takes.Add(1)
	s.taken.Add(uint64(took))
	life := int64(h.Rule.BudgetLifetime())
	if windowed(h.Rule.Algorithm) {
		// A window's batch lives to the window's end (ResetAfter, the
		// period's for a calendar quota), given back when idle for T.
		nb.until, nb.idle = ns+int64(dec.ResetAfter), ns+life
	} else {
		// A bucket's units left it at the take: spend them within T.
		nb.until = ns + life
	}
	nb.given = took + held
	nb.left.Store(took - need)
	nb.hits.Store(1)
	return nb, nb.decision(ns, true), nil
}

// windowed reports whether batches of alg live within a window.
func windowed(alg portero.Algorithm) bool {
	return alg == portero.FixedWindow || alg == portero.FixedWindowAnchored
}

// nextWant sizes the take after one at instant at from how fast the old
// batch was spent (all but held of what it was given): what lasts about
// budget at that rate, at least 1, at most twice want.
func nextWant(old *batch, held, at, want int64, budget time.Duration) int64 {
	switch {
	case old != nil && old.short > 0:
		return want
	case old == nil || at <= old.at:
		return min(2*want, maxWant)
	}
	used := float64(old.given - held)
	w := math.Ceil(used * float64(budget) / float64(at-old.at))
	return max(1, min(int64(min(w, maxWant)), 2*want))
}

// maxWant bounds a take's size (the stores cut it to the rule's largest
// cost anyway).
const maxWant = 1 << 50
