package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/portero-rl/portero"
)

// PerSecond is a store whose plain counters of one-second windows
// (portero.Counter) live in a Redis of their own, as envoyproxy/ratelimit
// routes the counters of its per-second limits to REDIS_PERSECOND_URL: a
// Redis for the many short-lived keys beside the one that keeps the
// longer windows. Everything else (AllowAll, Peek, leases, the other
// counters) is the main Store's.
type PerSecond struct {
	*Store
	// Second keeps the one-second counters.
	Second *Store
}

var _ portero.Counter = (*PerSecond)(nil)

// NewPerSecond returns main with its one-second counters in second. It
// takes both stores over: Close closes them.
func NewPerSecond(main, second *Store) *PerSecond { return &PerSecond{Store: main, Second: second} }

// Count implements portero.Counter: the counts of one-second windows in
// Second, the others in the main store, each in one pipeline of its own
// (two counts on one key are always in the same one).
func (p *PerSecond) Count(ctx context.Context, now time.Time, counts []portero.Count) error {
	var sec, other []int
	for i := range counts {
		if counts[i].Window == time.Second {
			sec = append(sec, i)
		} else {
			other = append(other, i)
		}
	}
	if len(sec) == 0 {
		return p.Store.Count(ctx, now, counts)
	}
	if len(other) == 0 {
		return p.Second.Count(ctx, now, counts)
	}
	for _, part := range []struct {
		st  *Store
		idx []int
	}{{p.Store, other}, {p.Second, sec}} {
		cs := make([]portero.Count, len(part.idx))
		for j, i := range part.idx {
			cs[j] = counts[i]
		}
		if err := part.st.Count(ctx, now, cs); err != nil {
			return err
		}
		for j, i := range part.idx {
			counts[i].Value = cs[j].Value
		}
	}
	return nil
}

// Connected reports whether both stores have reached their Redis.
func (p *PerSecond) Connected() bool { return p.Store.Connected() && p.Second.Connected() }

// Close closes both stores.
func (p *PerSecond) Close(ctx context.Context) error {
	return errors.Join(p.Store.Close(ctx), p.Second.Close(ctx))
}
