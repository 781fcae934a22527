// Package budget serves the rules that have a portero.Rule.Budget from
// leased budgets: a portero.Store in front of a shared store (a
// portero.Taker: store/redisstore, or store/memstore shared by the
// instances of a simulation) that decides a leased rule's hit from units
// this instance took from the shared state in one atomic call, and every
// other hit in the shared store, unchanged.
//
// The shared count stays exact: nothing is admitted that was not taken
// from it, and a batch of a window lives within its window. The price is
// early refusals: an instance refuses a hit its batch cannot cover when
// the shared state has nothing left to take, while others may still hold
// units. Batches are sized for about Budget of this instance's observed
// rate (growing at most twofold per take), and shrink as the shared state
// runs low (algorithm.Grant), down to a hit's own cost. The bounds per
// algorithm, and what Remaining means here, are in docs/distributed.md.
//
// Because it keeps the portero.Store contract (all-or-nothing across the
// hits of a call, Peek, errors), the engine's own rules — shadow and
// check-only hits, quota rules, the failure policy, headers — apply to a
// leased rule as to any other, with no code of their own: a hit its batch
// covers never reaches the shared store, so units already taken are spent
// while the shared store is down, and the failure policy decides when a
// take fails.
//
// Concurrency: deciding a hit from a batch is one compare-and-swap on
// the batch's unit count, found in a lock-free map; at most one take per
// (rule, key) is in flight, and the hits that need it wait for it.
package budget

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
)

// Defaults of the zero Config.
const (
	// DefaultMaxKeys caps the (rule, key) budgets kept at once.
	DefaultMaxKeys = 1 << 16
	// DefaultSweepInterval is how often the sweeper gives back what idle
	// batches of windows hold and forgets idle keys.
	DefaultSweepInterval = 100 * time.Millisecond
)

// Config configures a Store. The zero value gives the defaults.
type Config struct {
	// MaxKeys caps the (rule, key) budgets kept; a hit of a leased rule
	// beyond it is decided in the shared store, as without a budget.
	// DefaultMaxKeys when zero.
	MaxKeys int
	// SweepInterval is how often a goroutine (stopped by Close) calls
	// Sweep; DefaultSweepInterval when zero, none when negative (a
	// program on a virtual clock calls Sweep itself).
	SweepInterval time.Duration
	// Now is the clock of the sweeper and of Close's give-back; nil means
	// time.Now.
	Now func() time.Time
}

// Store is a portero.Store (and portero.Adjuster) that serves the rules
// with a Budget from leased budgets. Create it with New; it is safe for
// concurrent use. Close gives back what the batches of windows hold,
// stops the sweeper and closes the shared store.
type Store struct {
	shared portero.Store
	taker  portero.Taker
	adjust portero.Adjuster // nil: what a batch holds at its end is lost
	max    int64
	now    func() time.Time

	keys sync.Map // entryKey → *entry
	n    atomic.Int64

	closed    atomic.Bool
	closeOnce sync.Once
	stop      chan struct{}
	done      chan struct{}

	takes, taken, refusals, calls, returned, expired, hits atomic.Uint64
}

var (
	_ portero.Store      = (*Store)(nil)
	_ portero.Adjuster   = (*Store)(nil)
	_ portero.LeaseStore = (*Store)(nil)
)

var errClosed = fmt.Errorf("budget: %w", portero.ErrClosed)

// New returns a Store in front of shared, which must be a portero.Taker,
// with its sweeper started. The Store owns shared: Close closes it.
func New(shared portero.Store, cfg Config) (*Store, error) {
	taker, ok := shared.(portero.Taker)
	if !ok {
		return nil, fmt.Errorf("budget: %T cannot lease budgets (it is no portero.Taker)", shared)
	}
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("budget: max keys %d: must not be negative", cfg.MaxKeys)
	}
	s := &Store{shared: shared, taker: taker, max: int64(cmp.Or(cfg.MaxKeys, DefaultMaxKeys)), now: cfg.Now,
		stop: make(chan struct{}), done: make(chan struct{})}
	s.adjust, _ = shared.(portero.Adjuster)
	if s.now == nil {
		s.now = time.Now
	}
	if every := cmp.Or(cfg.SweepInterval, DefaultSweepInterval); every > 0 {
		go s.sweeper(every)
	} else {
		close(s.done)
	}
	return s, nil
}

// Shared returns the store the budgets are taken from.
func (s *Store) Shared() portero.Store { return s.shared }

// Stats are counters since the store was made.
type Stats struct {
	// Takes counts the takes that got units, Taken the units they got.
	Takes, Taken uint64
	// Refusals counts the takes that got nothing: the shared state had
	// fewer units left than the hit needed.
	Refusals uint64
	// Returned counts the units given back to the shared state (a window's
	// batch idle for its lifetime, or at Close); Expired the units that
	// ended unspent and could not be given back (a bucket's batch at the
	// end of its lifetime, a window's at the window's end).
	Returned, Expired uint64
	// Calls counts the calls to the shared store for leased rules (takes
	// and give-backs); Hits the hits of leased rules decided, counted when
	// their batch ends (those decided by the shared store alone, beyond
	// MaxKeys, are not). Calls/Hits is the store calls per decision.
	Calls, Hits uint64
	// Keys is the number of (rule, key) budgets held.
	Keys int
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{Takes: s.takes.Load(), Taken: s.taken.Load(), Refusals: s.refusals.Load(), Returned: s.returned.Load(),
		Expired: s.expired.Load(), Calls: s.calls.Load(), Hits: s.hits.Load(), Keys: int(s.n.Load())}
	s.keys.Range(func(_, v any) bool {
		if b := v.(*entry).cur.Load(); b != nil {
			st.Hits += uint64(b.hits.Load())
		}
		return true
	})
	return st
}

// entryKey names one budget: the rule (with its Budget) and the key.
type entryKey struct {
	rule portero.Rule
	key  string
}

// entry is one (rule, key)'s budget: the current batch, and the take in
// flight.
type entry struct {
	cur  atomic.Pointer[batch]
	mu   sync.Mutex
	fill chan struct{} // closed when the take in flight ends; nil when none
	want int64         // the next take's size
	dead bool          // dropped by the sweeper: a take gets only what its hit needs
}

// batch is what one take got, spent from memory.
type batch struct {
	left  atomic.Int64 // units not spent
	hits  atomic.Int64 // hits decided from it
	given int64        // units it started with
	at    int64        // the take's instant (Unix ns)
	until int64        // spendable at instants before it: a window's end, or at + T
	idle  int64        // a window's batch: from then on the sweeper gives back what is left; 0 for buckets
	short int64        // > 0: the shared state had fewer than short units at at (dec is the refusal)
	known int64        // the instant until which short is taken as still true
	dec   portero.Decision
}

// spend takes cost units from b if it holds them.
func (b *batch) spend(cost int64) bool {
	for {
		u := b.left.Load()
		if u < cost {
			return false
		}
		if b.left.CompareAndSwap(u, u-cost) {
			b.hits.Add(1)
			return true
		}
	}
}

// decision is what a hit decided from b at now is told: the shared
// state's figures as the take left them, this batch's units added to
// Remaining, the times counted on from the take.
func (b *batch) decision(now int64, allowed bool) portero.Decision {
	d := b.dec
	el := time.Duration(now - b.at)
	d.Allowed, d.Delay = allowed, 0
	d.Remaining += b.left.Load()
	d.ResetAfter = max(0, d.ResetAfter-el)
	d.PeriodLeft = max(0, d.PeriodLeft-el)
	d.RetryAfter = 0
	if !allowed {
		d.RetryAfter = max(time.Nanosecond, b.dec.RetryAfter-el)
	}
	return d
}

// entry returns h's budget, made on first use; nil when h's rule has no
// Budget or MaxKeys budgets are held.
func (s *Store) entry(h *portero.Hit) *entry {
	if h.Rule.Budget <= 0 {
		return nil
	}
	k := entryKey{h.Rule, h.Key}
	if e, ok := s.keys.Load(k); ok {
		return e.(*entry)
	}
	if s.n.Load() >= s.max {
		return nil
	}
	e, loaded := s.keys.LoadOrStore(k, &entry{want: 1})
	if !loaded {
		s.n.Add(1)
	}
	return e.(*entry)
}

// spent is a hit decided from a batch, to undo if its call is refused.
type spent struct {
	b    *batch
	cost int64
}

// undo puts back the units of hits whose call was refused. A batch that
// ended meanwhile keeps them unspent (they are lost, never admitted).
func undo(sp []spent) {
	for _, x := range sp {
		x.b.left.Add(x.cost)
		x.b.hits.Add(-1)
	}
}

// AllowAll implements portero.Store: the hits of leased rules are decided
// from their batches first (taking a batch when one is short), all or
// nothing with the other hits, which the shared store decides in one
// call; when a leased hit refuses, the others are only looked at (Peek).
func (s *Store) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	leased := false
	for i := range hits {
		leased = leased || hits[i].Rule.Budget > 0
	}
	if !leased {
		return s.shared.AllowAll(ctx, now, hits)
	}
	out := make([]portero.Decision, len(hits))
	var sbuf [4]spent
	var obuf [4]int
	sp, others := sbuf[:0], obuf[:0]
	refused := false
	for i := range hits {
		h := &hits[i]
		e := s.entry(h)
		if e == nil {
			others = append(others, i)
			continue
		}
		d, b, err := s.decide(ctx, e, now, h)
		if err != nil {
			undo(sp)
			return nil, err
		}
		out[i] = d
		if d.Allowed {
			sp = append(sp, spent{b, h.Cost})
		} else {
			refused = true
		}
	}
	if len(others) == 0 {
		if refused {
			undo(sp)
		}
		return out, nil
	}
	if refused {
		for _, i := range others {
			d, err := s.shared.Peek(ctx, hits[i].Rule, hits[i].Key, now, hits[i].Cost)
			if err != nil {
				undo(sp)
				return nil, err
			}
			out[i] = d
		}
		undo(sp)
		return out, nil
	}
	rest := make([]portero.Hit, len(others))
	for j, i := range others {
		rest[j] = hits[i]
	}
	decs, err := s.shared.AllowAll(ctx, now, rest)
	if err != nil {
		undo(sp)
		return nil, err
	}
	all := true
	for j, i := range others {
		out[i] = decs[j]
		all = all && decs[j].Allowed
	}
	if !all {
		undo(sp)
	}
	return out, nil
}

// decide decides h from e's batch, taking a new batch when it is short:
// the decision, and the batch it was spent from when admitted.
func (s *Store) decide(ctx context.Context, e *entry, now time.Time, h *portero.Hit) (portero.Decision, *batch, error) {
	ns := now.UnixNano()
	for {
		b := e.cur.Load()
		if b != nil && ns < b.until {
			if b.spend(h.Cost) {
				return b.decision(ns, true), b, nil
			}
			if b.short > 0 && ns < b.known && h.Cost-b.left.Load() >= b.short {
				return b.decision(ns, false), nil, nil
			}
		}
		b, d, mine, err := s.refill(ctx, e, now, h)
		if err != nil || mine {
			return d, b, err
		}
	}
}
