package storetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Reference is the simplest correct portero.Store: one mutex over plain maps,
// every decision taken straight from package algorithm. It is the oracle
// that the conformance suite compares other stores with, so it favours
// obviousness over speed and never forgets a key. Create it with
// NewReference; the zero value is not usable. It is safe for concurrent use
// and starts no goroutines.
//
// Its AllowAll defines what "all-or-nothing" means for every store: the hits
// are decided in order, each one seeing the state that the earlier hits of
// the same call would leave (so two hits on the same rule and key add up);
// when every hit is allowed all of them are counted, otherwise none is.
// The decisions are returned as computed in that order even when the call is
// refused: an Allowed decision beside a refused one means "this hit alone
// would have passed", and its Remaining is what it would have left.
//
// For the sliding log, a hit that follows p admitted units of the same rule
// and key in the same call is decided by algorithm.SlidingLog.DecideAfter:
// as if those p units had been logged at now.
type Reference struct {
	mu     sync.Mutex
	closed bool
	states map[refKey]algorithm.State
	logs   map[refKey]*algorithm.Log
}

type refKey struct {
	rule portero.Rule
	key  string
}

// NewReference returns an empty Reference store.
func NewReference() *Reference {
	return &Reference{states: map[refKey]algorithm.State{}, logs: map[refKey]*algorithm.Log{}}
}

var _ portero.Store = (*Reference)(nil)

// Close implements portero.Store. Later calls, Close included, return an
// error wrapping portero.ErrClosed.
func (r *Reference) Close(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("storetest: reference store: %w", portero.ErrClosed)
	}
	r.closed = true
	return nil
}

// deciders is what one hit needs: a Decider for the fixed-size algorithms,
// or the sliding log.
type deciders struct {
	fixed algorithm.Decider
	log   *algorithm.SlidingLog
}

// newDeciders validates r and returns its algorithm: exactly one of fixed and
// log is non-nil. Errors wrap portero.ErrInvalidLimit or
// portero.ErrUnknownAlgorithm.
func newDeciders(r portero.Rule) (deciders, error) {
	if err := r.Validate(); err != nil {
		return deciders{}, err
	}
	if r.Algorithm == portero.SlidingLog {
		l, err := algorithm.NewSlidingLog(r.Limit)
		if err != nil {
			return deciders{}, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		return deciders{log: l}, nil
	}
	d, err := algorithm.New(r.Algorithm, r.Limit)
	if err != nil {
		return deciders{}, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return deciders{fixed: d}, nil
}

func (d deciders) maxCost() int64 {
	if d.log != nil {
		return d.log.MaxCost()
	}
	return d.fixed.MaxCost()
}

// Peek implements portero.Store: algorithm.Look of the key's state, never
// counted (a sliding log is pruned, as a decision prunes it).
func (r *Reference) Peek(_ context.Context, rule portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return portero.Decision{}, fmt.Errorf("storetest: reference store: %w", portero.ErrClosed)
	}
	d, err := newDeciders(rule)
	if err != nil {
		return portero.Decision{}, err
	}
	if err := algorithm.CheckCost(cost, d.maxCost()); err != nil {
		return portero.Decision{}, fmt.Errorf("rule %q: %w", rule.Name, err)
	}
	k := refKey{rule, key}
	if d.log != nil {
		l := r.logs[k]
		if l == nil {
			l = new(algorithm.Log)
		}
		return d.log.Look(l, now.UnixNano(), cost), nil
	}
	s, found := r.states[k]
	return algorithm.Look(d.fixed, s, found, now.UnixNano(), cost), nil
}

// AllowAll implements portero.Store: it decides hits all-or-nothing and
// counts them when every hit passes.
func (r *Reference) AllowAll(_ context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("storetest: reference store: %w", portero.ErrClosed)
	}
	algs := make([]deciders, len(hits))
	for i, h := range hits {
		d, err := newDeciders(h.Rule)
		if err != nil {
			return nil, err
		}
		if err := algorithm.CheckCost(h.Cost, d.maxCost()); err != nil {
			return nil, fmt.Errorf("rule %q: %w", h.Rule.Name, err)
		}
		algs[i] = d
	}
	ns := now.UnixNano()
	type scratch struct {
		s     algorithm.State
		found bool
	}
	states := map[refKey]scratch{}
	pending := map[refKey]int64{}
	out := make([]portero.Decision, len(hits))
	all := true
	for i, h := range hits {
		k := refKey{h.Rule, h.Key}
		if a := algs[i].log; a != nil {
			l := r.logs[k]
			if l == nil {
				l = new(algorithm.Log)
			}
			d := a.DecideAfter(l, ns, pending[k], h.Cost)
			if d.Allowed {
				pending[k] += h.Cost
				r.logs[k] = l
			}
			out[i], all = d, all && d.Allowed
			continue
		}
		sc, ok := states[k]
		if !ok {
			sc.s, sc.found = r.states[k]
		}
		s, d := algorithm.DecideWithin(algs[i].fixed, sc.s, sc.found, ns, h.Cost, h.MaxDelay)
		if d.Allowed {
			states[k] = scratch{s, true}
		}
		out[i], all = d, all && d.Allowed
	}
	if all {
		for k, sc := range states {
			r.states[k] = sc.s
		}
		for k, p := range pending {
			a, _ := algorithm.NewSlidingLog(k.rule.Limit)
			a.Record(r.logs[k], ns, p)
		}
	}
	return out, nil
}

var _ portero.Adjuster = (*Reference)(nil)

// Adjust implements portero.Adjuster with the algorithms' own adjustments
// (algorithm.Adjuster, algorithm.SlidingLog.Charge): the oracle of the
// conformance suite's settlement traces.
func (r *Reference) Adjust(_ context.Context, now time.Time, adj []portero.Adjustment) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("storetest: reference store: %w", portero.ErrClosed)
	}
	algs := make([]deciders, len(adj))
	for i, a := range adj {
		d, err := newDeciders(a.Rule)
		if err != nil {
			return err
		}
		if err := algorithm.CheckAdjust(a.Rule, a.Delta); err != nil {
			return err
		}
		algs[i] = d
	}
	ns := now.UnixNano()
	for i, a := range adj {
		k := refKey{a.Rule, a.Key}
		if l := algs[i].log; l != nil {
			if a.Delta > 0 {
				lg := r.logs[k]
				if lg == nil {
					lg = new(algorithm.Log)
					r.logs[k] = lg
				}
				l.Charge(lg, ns, a.Delta)
			}
			continue
		}
		s, found := r.states[k]
		s, changed, err := algorithm.AdjustState(algs[i].fixed, s, found, ns, a.At.UnixNano(), a.Delta)
		if err != nil {
			return err
		}
		if changed {
			r.states[k] = s
		}
	}
	return nil
}
