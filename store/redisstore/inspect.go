package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
)

// Peek returns the decision that a request of cost 1 from key under rule
// would get, without counting it: the Decision AllowAll would return for
// that one hit, with Allowed saying whether it would pass and Remaining
// what it would leave. It runs the rule's script in its decide-only mode
// (ARGV 4 "0", which writes no state and sets no expiry), so that Redis
// answers exactly as for a real call and exactly as memstore's Peek does
// on the same state; a key with no state answers as a fresh one. As with
// a refused call, a sliding log is pruned of the entries that have expired
// and its latest instant moved to now (which changes no decision while
// time goes forward); nothing is logged. The instant is now with
// CallerClock and Redis's own with ServerClock. Peek neither reads nor
// fills the over-limit cache, and no failure policy applies: when Redis
// does not answer the error wraps portero.ErrStoreUnavailable. Other
// errors wrap portero.ErrClosed, portero.ErrInvalidLimit,
// portero.ErrUnknownAlgorithm or ErrScript.
//
// Peek and Reset serve the gateway's admin API (GET and DELETE on
// /api/keys), for an operator inspecting or forgiving one client.
func (s *Store) Peek(ctx context.Context, rule portero.Rule, key string, now time.Time) (portero.Decision, error) {
	if s.closed.Load() {
		return portero.Decision{}, fmt.Errorf("redisstore: %w", portero.ErrClosed)
	}
	c, err := s.compiled(rule)
	if err != nil {
		return portero.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	cn := s.conn.Load()
	if cn == nil {
		return portero.Decision{}, &unavailableError{err: errNotConnected}
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	hits := []portero.Hit{{Rule: rule, Key: key, Cost: 1}}
	out := make([]portero.Decision, 1)
	if _, err := s.run(ctx, cn, now, []*compiled{c}, hits, oneCall(s.key(c, hits[0]), c.alg), false, out); err != nil {
		return portero.Decision{}, err
	}
	return out[0], nil
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
		return fmt.Errorf("redisstore: %w", portero.ErrClosed)
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
