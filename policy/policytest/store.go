// Package policytest holds the portero.Store the tests of the policy, the
// doors and the gateway decide in: the conformance suite's reference store
// (storetest.Reference), whose zero value is ready, that can be made to
// fail (SetErr) and counts its calls. It is not meant for production.
package policytest

import (
	"context"
	"sync"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/storetest"
)

// Store is storetest.Reference with failures on demand and a call count.
// The zero value is ready to use and safe for concurrent use.
type Store struct {
	mu    sync.Mutex
	ref   *storetest.Reference
	err   error
	calls int
}

var _ portero.Store = (*Store)(nil)

// SetErr makes every later AllowAll and Peek fail with err (nil to heal).
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

// call counts a call and returns the reference store, or the error set.
func (s *Store) call() (*storetest.Reference, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.ref == nil {
		s.ref = storetest.NewReference()
	}
	return s.ref, s.err
}

// AllowAll implements portero.Store.
func (s *Store) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	ref, err := s.call()
	if err != nil {
		return nil, err
	}
	return ref.AllowAll(ctx, now, hits)
}

// Peek implements portero.Store.
func (s *Store) Peek(ctx context.Context, rule portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	ref, err := s.call()
	if err != nil {
		return portero.Decision{}, err
	}
	return ref.Peek(ctx, rule, key, now, cost)
}

// Close implements portero.Store.
func (s *Store) Close(context.Context) error { return nil }
