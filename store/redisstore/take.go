package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

var _ portero.Taker = (*Store)(nil)

// TakeSource returns the Lua source of the script that takes a leased
// budget (Take): the prelude, the algorithms that lease and lua/take.lua.
// Like Source, it is exposed for documentation and for running the
// script by hand.
func TakeSource() string {
	algs := []portero.Algorithm{calendarAlg}
	for _, a := range portero.Algorithms {
		if portero.Leasable(a) {
			algs = append(algs, a)
		}
	}
	return assemble(algs, takeDriver)
}

// Take implements portero.Taker: one script call (lua/take.lua, the
// library's NAME_take), atomic on the key, at Redis's instant (or now with
// CallerClock), through the same deadline and breaker as AllowAll. When Redis does not answer the error
// wraps portero.ErrStoreUnavailable and nothing is known to be taken.
func (s *Store) Take(ctx context.Context, now time.Time, rule portero.Rule, key string, need, want int64) (int64, portero.Decision, error) {
	if s.closed.Load() {
		return 0, portero.Decision{}, errClosed
	}
	rule.Budget = 0
	c, err := s.compiled(rule)
	if err != nil {
		return 0, portero.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	if err := algorithm.CheckTake(rule, need, want, c.limit); err != nil {
		return 0, portero.Decision{}, fmt.Errorf("redisstore: key %q: %w", key, err)
	}
	hits := []portero.Hit{{Rule: rule, Key: key, Cost: need}}
	cn := s.conn.Load()
	if cn == nil {
		return 0, portero.Decision{}, s.unavailableCall(hits, s.server.failed(errNotConnected))
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	k := s.key(c, hits[0])
	args := make([]string, 5, 11)
	args[0], args[1], args[2] = s.clockArgs(now, false)
	args[3], args[4] = "1", s.minTTL
	p := s.argv(c, now)
	args = append(args, string(c.alg), strconv.FormatInt(need, 10), p[0], p[1], p[2], strconv.FormatInt(min(want, c.limit), 10))
	var r [5]int64
	err = s.nodeOf(cn, k).exec(func() error {
		res, err := s.scripts.take.Exec(ctx, cn.client, []string{k}, args).ToArray()
		if err != nil {
			return err
		}
		if len(res) != len(r) {
			return fmt.Errorf("redisstore: %w: %d integers in the take reply, want %d", ErrScript, len(res), len(r))
		}
		if r, err = five(res); err != nil {
			return fmt.Errorf("redisstore: %w: take reply: %v", ErrScript, err)
		}
		return nil
	})
	if err != nil {
		err = s.describe(err, []*compiled{c}, hits, oneCall(k, c.alg))
		if unavailable(err) {
			return 0, portero.Decision{}, s.unavailableCall(hits, err)
		}
		s.errs.Add(1)
		return 0, portero.Decision{}, err
	}
	return r[0], c.decision(r[0] > 0, r[1], r[2], r[3], r[4]), nil
}
