package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/portero-rl/portero"
)

var _ portero.Counter = (*Store)(nil)

// Count implements portero.Counter as envoyproxy/ratelimit counts in
// Redis: INCRBY then EXPIRE (whole seconds, rounded up) per count, in one
// pipeline, on the count's Key followed by its window's start in Unix
// seconds. With envoyproxy/ratelimit's keys (package descriptor's
// compatibility mode) both count in the same counters, so that a fleet can
// move from one to the other mid-window. Config.Prefix does not apply; the
// deadline and the breaker do.
func (s *Store) Count(ctx context.Context, now time.Time, counts []portero.Count) error {
	if s.closed.Load() {
		return errClosed
	}
	if len(counts) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, 0, 2*len(counts))
	keys := make([]string, len(counts))
	cn := s.conn.Load()
	if cn == nil {
		return s.unavailableCall(nil, s.server.failed(errNotConnected))
	}
	for i := range counts {
		c := &counts[i]
		w := int64(c.Window / time.Second)
		if w <= 0 || c.Window%time.Second != 0 {
			return fmt.Errorf("redisstore: counter %q: window %v: want a whole number of seconds", c.Key, c.Window)
		}
		if c.Add > math.MaxInt64 {
			// What Redis answers to INCRBY with such a number.
			return fmt.Errorf("redisstore: counter %q: %w: add %d: value is not an integer or out of range", c.Key, ErrScript, c.Add)
		}
		key := c.Key + strconv.FormatInt(floorDiv(now.Unix(), w)*w, 10)
		keys[i] = key
		ttl := int64((max(c.TTL, c.Window) + time.Second - 1) / time.Second)
		cmds = append(cmds,
			cn.client.B().Incrby().Key(key).Increment(int64(c.Add)).Build(),
			cn.client.B().Expire().Key(key).Seconds(ttl).Build())
	}
	s.calls.Add(1)
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	err := s.countOn(cn, keys, func(errs []error) {
		res := cn.client.DoMulti(ctx, cmds...)
		for i := range counts {
			v, err := res[2*i].AsInt64()
			if err == nil {
				err = res[2*i+1].Error()
			}
			errs[i] = err
			counts[i].Value = uint64(v)
		}
	})
	if err == nil {
		s.redisCalls.Add(1)
		return nil
	}
	if unavailable(err) {
		return s.unavailableCall(nil, err)
	}
	s.errs.Add(1)
	return fmt.Errorf("redisstore: counter %q: %w", counts[0].Key, err)
}

// countOn runs one pipeline (fn, which sets the error of each key's
// commands) under the breakers of the nodes that serve keys, each told how
// its own commands ended, and returns the first key's error. On a cluster
// the keys may be on several masters: a dead one fails the call, and only
// its own health.
func (s *Store) countOn(cn *conn, keys []string, fn func(errs []error)) error {
	of := make([]*node, len(keys))
	dones := map[*node]func(error) error{}
	for i, k := range keys {
		n := s.nodeOf(cn, k)
		of[i] = n
		if dones[n] != nil {
			continue
		}
		done, err := n.allow()
		if err != nil {
			for _, d := range dones {
				d(context.Canceled) // not sent: counts for nothing
			}
			return err
		}
		dones[n] = done
	}
	errs := make([]error, len(keys))
	fn(errs)
	ended := map[*node]error{} // each node's first error
	for i, n := range of {
		if ended[n] == nil {
			ended[n] = errs[i]
		}
	}
	for n, done := range dones {
		ended[n] = done(ended[n])
	}
	for _, n := range of {
		if err := ended[n]; err != nil {
			return err
		}
	}
	return nil
}

// floorDiv is a/b rounded down, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
