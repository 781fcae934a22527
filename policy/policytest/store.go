// Package policytest holds a small in-memory portero.Store for the tests of
// the policy, the middleware and the gateway: one mutex, one map, the pure
// algorithms, all-or-nothing. It is simple enough to trust and is not meant
// for production (use store/memstore): it never evicts, and it does not
// support sliding-log.
package policytest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Store is a map-based portero.Store. The zero value is ready to use and
// safe for concurrent use. Err, when set, is returned by every AllowAll and
// Peek (to test failure policies).
type Store struct {
	mu    sync.Mutex
	state map[stateKey]algorithm.State
	err   error
	calls int
}

type stateKey struct {
	rule portero.Rule
	key  string
}

var _ portero.Store = (*Store)(nil)

// SetErr makes every later AllowAll fail with err (nil to heal).
func (s *Store) SetErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// Calls returns how many times AllowAll and Peek were called.
func (s *Store) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Reset forgets the state of key under rule.
func (s *Store) Reset(_ context.Context, rule portero.Rule, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.state, stateKey{rule, key})
	return nil
}

// AllowAll implements portero.Store.
func (s *Store) AllowAll(_ context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	if s.state == nil {
		s.state = map[stateKey]algorithm.State{}
	}
	decs := make([]portero.Decision, len(hits))
	next := make([]algorithm.State, len(hits))
	all := true
	for i, h := range hits {
		d, err := algorithm.New(h.Rule.Algorithm, h.Rule.Limit)
		if err != nil {
			return nil, fmt.Errorf("policytest: rule %q: %w", h.Rule.Name, err)
		}
		if err := algorithm.CheckCost(h.Cost, d.MaxCost()); err != nil {
			return nil, err
		}
		k := stateKey{h.Rule, h.Key}
		st, found := s.state[k]
		// Two hits on the same rule and key in one call see each other.
		for j := 0; j < i; j++ {
			if hits[j].Rule == h.Rule && hits[j].Key == h.Key {
				st, found = next[j], true
			}
		}
		next[i], decs[i] = algorithm.DecideWithin(d, st, found, now.UnixNano(), h.Cost, h.MaxDelay)
		all = all && decs[i].Allowed
	}
	if all {
		for i, h := range hits {
			s.state[stateKey{h.Rule, h.Key}] = next[i]
		}
	}
	return decs, nil
}

// Peek implements portero.Store: algorithm.Look of the key's state at
// cost, never counted. It fails with the error set by SetErr, as AllowAll
// does, and counts as a call.
func (s *Store) Peek(_ context.Context, rule portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil {
		return portero.Decision{}, s.err
	}
	d, err := algorithm.New(rule.Algorithm, rule.Limit)
	if err != nil {
		return portero.Decision{}, fmt.Errorf("policytest: rule %q: %w", rule.Name, err)
	}
	st, found := s.state[stateKey{rule, key}]
	return algorithm.Look(d, st, found, now.UnixNano(), cost), nil
}

// Close implements portero.Store.
func (s *Store) Close(context.Context) error { return nil }
