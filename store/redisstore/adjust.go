package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

var _ portero.Adjuster = (*Store)(nil)

// adjustScript settles one key.
var adjustScript = rueidis.NewLuaScript(AdjustSource())

// AdjustSource returns the Lua source of the script that applies one
// adjustment (Adjust): the prelude and lua/adjust.lua. Like Source, it is
// exposed for documentation and for running the script by hand.
func AdjustSource() string { return readLua("prelude.lua") + "\n" + readLua("adjust.lua") }

// Adjust implements portero.Adjuster: one script call per adjustment, each
// atomic on its key, in order, at Redis's instant (or now with
// CallerClock). A refund names the decision it gives back by its age (now
// − At by the caller's clock), so that the offset between the caller's
// clock and Redis's does not move it to another window. Every adjustment
// is checked before the first call (portero.ErrNotAdjustable, invalid
// rules); when Redis fails part way, the adjustments before the failure
// are applied and the error wraps portero.ErrStoreUnavailable. A charge or
// refund larger than twice the rule's limit is cut there: it has the same
// effect, and keeps the script's arithmetic exact.
func (s *Store) Adjust(ctx context.Context, now time.Time, adj []portero.Adjustment) error {
	if s.closed.Load() {
		return errClosed
	}
	cs := make([]*compiled, len(adj))
	for i, a := range adj {
		c, err := s.compiled(a.Rule)
		if err != nil {
			return fmt.Errorf("redisstore: %w", err)
		}
		if err := algorithm.CheckAdjust(a.Rule, a.Delta); err != nil {
			return fmt.Errorf("redisstore: %w", err)
		}
		cs[i] = c
	}
	cn := s.conn.Load()
	if cn == nil {
		return s.server.failed(errNotConnected)
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	for i, a := range adj {
		if a.Delta == 0 {
			continue
		}
		c := cs[i]
		delta := min(max(a.Delta, -2*c.limit), 2*c.limit)
		age := max(now.Sub(a.At), 0)
		if a.Delta > 0 {
			age = 0
		}
		clock, sec, ns := s.clockArgs(now, false)
		args := []string{clock, sec, ns, "1", s.minTTL, string(c.alg), strconv.FormatInt(delta, 10), strconv.FormatInt(int64(age), 10)}
		p := s.argv(c, now)
		args = append(args, p[0], p[1], p[2])
		key := s.key(c, portero.Hit{Rule: a.Rule, Key: a.Key})
		err := s.nodeOf(cn, key).exec(func() error {
			return adjustScript.Exec(ctx, cn.client, []string{key}, args).Error()
		})
		if err != nil {
			if unavailable(err) {
				return fmt.Errorf("redisstore: adjust key %q (redis key %q): %w", a.Key, key, err)
			}
			return fmt.Errorf("redisstore: adjust key %q (redis key %q), rule %q: %w: %v", a.Key, key, a.Rule.Name, ErrScript, err)
		}
	}
	return nil
}
