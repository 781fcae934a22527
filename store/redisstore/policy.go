package redisstore

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Policy says what a rule does while Redis is unavailable (a timeout, a
// refused connection, an open circuit breaker).
type Policy string

const (
	// FailClosed refuses every request of the rule. The call returns the
	// refusals and an error wrapping portero.ErrStoreUnavailable, so that a
	// door can answer 503 rather than 429. The default.
	FailClosed Policy = "fail-closed"
	// FailOpen admits every request of the rule, uncounted.
	FailOpen Policy = "fail-open"
	// FailLocal decides in this instance's memory with Config.LocalShare of
	// the limit: approximate, but bounded by instances × share × limit.
	FailLocal Policy = "local"
)

// ParsePolicy returns the policy with the given name.
func ParsePolicy(name string) (Policy, error) {
	p := Policy(name)
	return p, p.validate()
}

func (p Policy) validate() error {
	switch p {
	case FailClosed, FailOpen, FailLocal:
		return nil
	}
	return fmt.Errorf("redisstore: unknown failure policy %q: want %s, %s or %s", string(p), FailClosed, FailOpen, FailLocal)
}

func (s *Store) policy(r portero.Rule) Policy {
	if p, ok := s.cfg.Policies[r.Name]; ok {
		return p
	}
	return s.cfg.Policy
}

// fallback decides a call that Redis could not, by each rule's policy,
// all-or-nothing as ever: one fail-closed rule refuses the call, and local
// rules count only when every hit passes.
func (s *Store) fallback(ctx context.Context, now time.Time, cs []*compiled, hits []portero.Hit, cause error) ([]portero.Decision, error) {
	s.fallbacks.Add(1)
	if !s.degraded.Swap(true) {
		s.log.Warn("redisstore: redis unavailable: failure policies active", "err", cause)
	}
	out := make([]portero.Decision, len(hits))
	closed := false
	var local []portero.Hit
	var localIdx []int
	for i, h := range hits {
		switch s.policy(h.Rule) {
		case FailClosed:
			closed = true
		case FailLocal:
			local = append(local, h)
			localIdx = append(localIdx, i)
		}
	}
	var err error
	if closed {
		for i := range hits {
			out[i] = portero.Decision{Limit: cs[i].limit, RetryAfter: s.cfg.BreakerOpen}
		}
		err = fmt.Errorf("redisstore: failing closed: %w", cause)
		s.errs.Add(1)
	} else {
		all := true
		if len(local) > 0 {
			ld := s.local.allowAll(now, local)
			for j, i := range localIdx {
				out[i] = ld[j]
				all = all && ld[j].Allowed
			}
		}
		for i, h := range hits {
			if s.policy(h.Rule) == FailOpen {
				out[i] = portero.Decision{Allowed: all, Limit: cs[i].limit, Remaining: cs[i].limit - h.Cost}
			}
		}
	}
	for i := range out {
		out[i].Degraded = true // the policy decided, not the shared count
	}
	if s.cfg.OnFallback != nil {
		s.cfg.OnFallback(Fallback{Hits: hits, Decisions: out, Err: cause})
	}
	return out, err
}

// localStore is the memory the FailLocal policy decides in: each rule
// scaled down to a share, state dropped once it equals no state.
type localStore struct {
	share float64
	mu    sync.Mutex
	calls int
	rules map[portero.Rule]*localRule
	state map[localKey]*localEntry
}

type localKey struct {
	rule portero.Rule
	key  string
}

type localRule struct {
	fixed algorithm.Decider
	log   *algorithm.SlidingLog
	err   error
}

type localEntry struct {
	s      algorithm.State
	log    *algorithm.Log
	expiry int64
}

func newLocalStore(share float64) *localStore {
	return &localStore{share: share, rules: map[portero.Rule]*localRule{}, state: map[localKey]*localEntry{}}
}

// scale returns l with its count, burst and rate multiplied by share (each
// at least 1 unit).
func scale(l portero.Limit, share float64) portero.Limit {
	if share >= 1 {
		return l
	}
	sc := func(n int64) int64 { return max(1, int64(math.Floor(float64(n)*share))) }
	l.Count = sc(l.Count)
	if l.Burst > 0 {
		l.Burst = sc(l.Burst)
	}
	l.Rate *= share
	return l
}

func (ls *localStore) rule(r portero.Rule) *localRule {
	if lr, ok := ls.rules[r]; ok {
		return lr
	}
	l := scale(r.Limit, ls.share)
	lr := &localRule{}
	if r.Algorithm == portero.SlidingLog {
		lr.log, lr.err = algorithm.NewSlidingLog(l)
	} else {
		lr.fixed, lr.err = algorithm.New(r.Algorithm, l)
	}
	ls.rules[r] = lr
	return lr
}

// allowAll decides hits all-or-nothing. A hit whose cost exceeds the scaled
// limit is refused.
func (ls *localStore) allowAll(now time.Time, hits []portero.Hit) []portero.Decision {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ns := now.UnixNano()
	ls.calls++
	if ls.calls%1024 == 0 {
		for k, e := range ls.state {
			if e.expiry <= ns {
				delete(ls.state, k)
			}
		}
	}
	out := make([]portero.Decision, len(hits))
	type scratch struct {
		s     algorithm.State
		found bool
	}
	states := map[localKey]scratch{}
	pending := map[localKey]int64{}
	all := true
	for i, h := range hits {
		lr := ls.rule(h.Rule)
		k := localKey{h.Rule, h.Key}
		e := ls.state[k]
		if e != nil && e.expiry <= ns {
			delete(ls.state, k)
			e = nil
		}
		var max int64
		switch {
		case lr.err != nil:
		case lr.log != nil:
			max = lr.log.MaxCost()
		default:
			max = lr.fixed.MaxCost()
		}
		if lr.err != nil || h.Cost > max {
			out[i], all = portero.Decision{Limit: max}, false
			continue
		}
		if lr.log != nil {
			if e == nil {
				e = &localEntry{log: new(algorithm.Log)}
				ls.state[k] = e
			}
			d := lr.log.DecideAfter(e.log, ns, pending[k], h.Cost)
			if d.Allowed {
				pending[k] += h.Cost
			}
			out[i], all = d, all && d.Allowed
			continue
		}
		sc, ok := states[k]
		if !ok && e != nil {
			sc = scratch{e.s, true}
		}
		st, d := lr.fixed.Decide(sc.s, sc.found, ns, h.Cost)
		if d.Allowed {
			states[k] = scratch{st, true}
		}
		out[i], all = d, all && d.Allowed
	}
	if all {
		for k, sc := range states {
			lr := ls.rules[k.rule]
			ls.state[k] = &localEntry{s: sc.s, expiry: lr.fixed.Expiry(sc.s)}
		}
		for k, p := range pending {
			lr, e := ls.rules[k.rule], ls.state[k]
			lr.log.Record(e.log, ns, p)
			e.expiry = lr.log.Expiry(e.log)
		}
	}
	return out
}
