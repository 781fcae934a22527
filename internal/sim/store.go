package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Store is a small portero.Store over the pure algorithms, for experiments:
// one map, one lock, no eviction. It exists so that the simulations run
// through the same interface as the real stores (store/memstore,
// store/redisstore) without depending on them. The zero value is not usable;
// call NewStore. It is safe for concurrent use and starts no goroutines.
type Store struct {
	mu     sync.Mutex
	closed bool
	state  map[stateKey]*entry
}

var _ portero.Store = (*Store)(nil)

type stateKey struct {
	rule portero.Rule
	key  string
}

type entry struct {
	state algorithm.State
	log   algorithm.Log // sliding-log only
}

// NewStore returns an empty Store.
func NewStore() *Store { return &Store{state: make(map[stateKey]*entry)} }

// AllowAll implements portero.Store: it decides every hit at now and counts
// them only if all are admitted. A (rule, key) pair may appear at most once
// per call.
func (s *Store) AllowAll(_ context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	type staged struct {
		k     stateKey
		e     *entry
		next  algorithm.State
		log   *algorithm.SlidingLog
		cost  int64
		fresh bool
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, portero.ErrClosed
	}
	ns := now.UnixNano()
	out := make([]portero.Decision, len(hits))
	stage := make([]staged, len(hits))
	seen := make(map[stateKey]bool, len(hits))
	all := true
	for i, h := range hits {
		if err := h.Rule.Validate(); err != nil {
			return nil, err
		}
		k := stateKey{h.Rule, h.Key}
		if seen[k] {
			return nil, fmt.Errorf("sim store: rule %q and key %q twice in one call", h.Rule.Name, h.Key)
		}
		seen[k] = true
		e, found := s.state[k]
		if !found {
			e = &entry{}
		}
		st := staged{k: k, e: e, cost: h.Cost, fresh: !found}
		if h.Rule.Algorithm == portero.SlidingLog {
			lg, err := algorithm.NewSlidingLog(h.Rule.Limit)
			if err != nil {
				return nil, err
			}
			if err := algorithm.CheckCost(h.Cost, lg.MaxCost()); err != nil {
				return nil, err
			}
			st.log = lg
			out[i] = lg.Decide(&e.log, ns, h.Cost)
		} else {
			d, err := algorithm.New(h.Rule.Algorithm, h.Rule.Limit)
			if err != nil {
				return nil, err
			}
			if err := algorithm.CheckCost(h.Cost, d.MaxCost()); err != nil {
				return nil, err
			}
			st.next, out[i] = d.Decide(e.state, found, ns, h.Cost)
		}
		stage[i] = st
		all = all && out[i].Allowed
	}
	if !all {
		// Nothing is counted. A refused hit's RetryAfter stands; an admitted
		// one that was rolled back reports itself refused with no wait of its
		// own, since another rule is what turned it away.
		for i := range out {
			if out[i].Allowed {
				out[i].Allowed = false
				out[i].Delay = 0
			}
		}
		return out, nil
	}
	for _, st := range stage {
		if st.log != nil {
			st.log.Record(&st.e.log, ns, st.cost)
		} else {
			st.e.state = st.next
		}
		if st.fresh {
			s.state[st.k] = st.e
		}
	}
	return out, nil
}

// Close implements portero.Store; later calls to AllowAll fail with
// portero.ErrClosed.
func (s *Store) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
