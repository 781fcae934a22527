package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Peek returns what a request of cost from key under rule would get,
// without counting it (portero.Store.Peek, algorithm.Look): Allowed,
// RetryAfter and Delay as AllowAll would decide that one hit, Remaining and
// ResetAfter as they stand now. It runs the rule's script once in its
// decide-only mode (ARGV 4 "0", which writes no state and sets no expiry)
// on two hits of the key: one of cost 0, which takes nothing and so
// reports what stands now, then one of cost, which sees the state the
// first brought up to date (it decides the same); so Redis answers exactly
// as for a real call and exactly as memstore's Peek does on the same
// state. A key with no state answers as a fresh one. As with a refused
// call, a sliding log is pruned of the entries that have expired and its
// latest instant moved to now (which changes no decision while time goes
// forward); nothing is logged. The instant is now with CallerClock and
// Redis's own with ServerClock. Peek neither reads nor fills the
// over-limit cache, and no failure policy applies: when Redis does not
// answer the error wraps portero.ErrStoreUnavailable. Other errors wrap
// portero.ErrClosed, portero.ErrInvalidLimit, portero.ErrUnknownAlgorithm,
// portero.ErrInvalidCost, portero.ErrCostExceedsLimit or ErrScript.
//
// Peek and Reset serve the gateway's admin API (GET and DELETE on
// /api/keys), for an operator inspecting or forgiving one client, and the
// engine's check-only hits.
func (s *Store) Peek(ctx context.Context, rule portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	if s.closed.Load() {
		return portero.Decision{}, errClosed
	}
	c, err := s.compiled(rule)
	if err != nil {
		return portero.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	if err := algorithm.CheckCost(cost, c.limit); err != nil {
		return portero.Decision{}, fmt.Errorf("redisstore: rule %q, key %q: %w", rule.Name, key, err)
	}
	cn := s.conn.Load()
	if cn == nil {
		return portero.Decision{}, &unavailableError{err: errNotConnected}
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	hits := []portero.Hit{{Rule: rule, Key: key, Cost: 0}, {Rule: rule, Key: key, Cost: cost}}
	k := s.key(c, hits[1])
	call := call{idx: []int{0, 1}, keys: []string{k, k}, algs: []portero.Algorithm{c.alg, c.alg}}
	out := make([]portero.Decision, 2)
	if _, err := s.run(ctx, cn, now, []*compiled{c, c}, hits, call, false, out); err != nil {
		return portero.Decision{}, err
	}
	d := out[1]
	d.Remaining, d.ResetAfter = out[0].Remaining, out[0].ResetAfter
	return d, nil
}

// Reset forgets key's state under rule: it deletes the one Redis key that
// holds it (Key: the prefix, the hash tag, the rule's fingerprint), which
// lives in one cluster slot, so a single DEL serves a cluster too. Resetting
// a key that has no state is not an error. It also forgets the key in this
// store's over-limit cache; the over-limit caches of other instances keep a refusal until it
// would lapse anyway (the gateway does not turn that cache on). Errors
// wrap portero.ErrStoreUnavailable when Redis does not answer, and
// portero.ErrClosed, portero.ErrInvalidLimit or portero.ErrUnknownAlgorithm.
func (s *Store) Reset(ctx context.Context, rule portero.Rule, key string) error {
	if s.closed.Load() {
		return errClosed
	}
	c, err := s.compiled(rule)
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	k := s.key(c, portero.Hit{Rule: rule, Key: key, Cost: 1})
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	if cn := s.conn.Load(); cn == nil {
		err = errNotConnected
	} else {
		err = cn.client.Do(ctx, cn.client.B().Del().Key(k).Build()).Error()
	}
	if s.over != nil {
		s.over.drop(k)
	}
	if err != nil {
		if unavailable(err) {
			return &unavailableError{err: fmt.Errorf("reset key %q (redis key %q): %w", key, k, err)}
		}
		return fmt.Errorf("redisstore: reset key %q (redis key %q): %w", key, k, err)
	}
	return nil
}
