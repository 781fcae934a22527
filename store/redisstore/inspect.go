package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Peek implements portero.Store.Peek: it runs the rule's script once in
// its decide-only mode (which writes no state and sets no expiry) on two
// hits of the key, one of cost 0, which reports what stands now, then one
// of cost, which decides as AllowAll would; so Redis answers exactly as
// memstore's Peek on the same state. As with a refused call, a sliding log
// is pruned of its expired entries. When Redis does not answer the error
// wraps portero.ErrStoreUnavailable.
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
		return portero.Decision{}, s.server.failed(errNotConnected)
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

// Reset forgets key's state under rule (for an operator forgiving a
// client): one DEL of the Redis key that holds it (Key), in one cluster
// slot. A key with no state is no error; when Redis does not answer the
// error wraps portero.ErrStoreUnavailable.
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
	if err != nil {
		if unavailable(err) {
			return &unavailableError{err: fmt.Errorf("reset key %q (redis key %q): %w", key, k, err)}
		}
		return fmt.Errorf("redisstore: reset key %q (redis key %q): %w", key, k, err)
	}
	return nil
}
