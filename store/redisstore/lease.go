package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/redis/rueidis"
)

// Concurrency leases: Store implements portero.LeaseStore. The leases of a
// rule under a key are one sorted set, PREFIX{KEY}:lease:NAME, of lease ids
// scored by expiry in microseconds (of Redis's clock with ServerClock),
// changed only by lua/lease.lua: acquire drops the expired leases, counts
// and adds in one atomic step; renew moves an expiry; release removes it.
// A lease its holder stops renewing expires after the rule's TTL, and the
// set with its last lease. While Redis is unavailable, Acquire, Renew and
// Release return an error wrapping portero.ErrStoreUnavailable and decide
// nothing: the caller's failure policy answers.

// leaseScript is lease.lua: immutable once built (it holds the hash).
var leaseScript = rueidis.NewLuaScript(readLua("lease.lua"))

// leaseState is the store's lease bookkeeping: the id prefix and counter.
type leaseState struct {
	once   sync.Once
	prefix string // random per store, so ids never collide across instances
	seq    atomic.Uint64
}

func (ls *leaseState) id() string {
	ls.once.Do(func() {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		ls.prefix = hex.EncodeToString(b[:]) + "-"
	})
	return ls.prefix + strconv.FormatUint(ls.seq.Add(1), 36)
}

var _ portero.LeaseStore = (*Store)(nil)

// LeaseKey returns the Redis key of the sorted set that holds the leases of
// the rule named name under key.
func (s *Store) LeaseKey(name, key string) string {
	if s.cfg.HashTag == nil {
		return s.cfg.Prefix + "{" + key + "}:lease:" + name
	}
	tag := s.cfg.HashTag(portero.Hit{Rule: portero.Rule{Name: name}, Key: key, Cost: 1})
	return s.cfg.Prefix + "{" + tag + "}:" + key + ":lease:" + name
}

// Acquire implements portero.LeaseStore (see the comment on leases above
// for what it does while Redis is unavailable). With ServerClock now is
// not used.
func (s *Store) Acquire(ctx context.Context, now time.Time, rule portero.ConcurrencyRule, key string) (portero.Lease, portero.Decision, error) {
	if s.closed.Load() {
		return nil, portero.Decision{}, errClosed
	}
	if err := rule.Validate(); err != nil {
		return nil, portero.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	ttl := micros(rule.LeaseTTL())
	id := s.leases.id()
	l := &redisLease{s: s, key: s.LeaseKey(rule.Name, key), id: id, ttl: ttl}
	res, err := s.leaseCall(ctx, now, l.key, "acquire", id, strconv.FormatInt(rule.Max, 10), ttl)
	if err == nil {
		var r []int64
		if r, err = res.AsIntSlice(); err == nil && len(r) != 3 {
			err = fmt.Errorf("%w: %d integers in the reply, want 3", ErrScript, len(r))
		}
		if err == nil {
			d := portero.Decision{Allowed: r[0] == 1, Limit: rule.Max, Remaining: r[1], RetryAfter: time.Duration(r[2]) * time.Microsecond}
			if !d.Allowed {
				return nil, d, nil
			}
			return l, d, nil
		}
	}
	if !unavailable(err) {
		s.errs.Add(1)
		return nil, portero.Decision{}, s.leaseError(rule.Name, key, err)
	}
	cause := s.unavailableCall([]portero.Hit{{Rule: portero.Rule{Name: rule.Name}, Key: key, Cost: 1}}, err)
	return nil, portero.Decision{}, fmt.Errorf("redisstore: concurrency rule %q, key %q: %w", rule.Name, key, cause)
}

// leaseCall runs lease.lua once under the breaker and the deadline. An
// error that Redis was unavailable comes marked so (node.exec).
func (s *Store) leaseCall(ctx context.Context, now time.Time, key, op, id, maxLeases, ttl string) (rueidis.RedisMessage, error) {
	clock, sec, us := s.clockArgs(now, true)
	args := []string{op, clock, sec, us, id, maxLeases, ttl, s.minTTL}
	var msg rueidis.RedisMessage
	cn := s.conn.Load()
	if cn == nil {
		return msg, s.server.failed(errNotConnected)
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	err := s.nodeOf(cn, key).exec(func() error {
		var err error
		msg, err = leaseScript.Exec(ctx, cn.client, []string{key}, args).ToMessage()
		return err
	})
	return msg, err
}

// leaseError describes a lease call that failed for another reason than
// Redis's unavailability.
func (s *Store) leaseError(name, key string, err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok {
		return fmt.Errorf("redisstore: concurrency rule %q, key %q (redis key %q): %w: %s", name, key, s.LeaseKey(name, key), ErrScript, re.Error())
	}
	return fmt.Errorf("redisstore: concurrency rule %q, key %q: %w", name, key, err)
}

// micros formats d in whole microseconds, rounded up.
func micros(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Microsecond-1)/time.Microsecond), 10)
}

// redisLease is a lease held in Redis.
type redisLease struct {
	s       *Store
	key, id string
	ttl     string // µs
}

// Renew implements portero.Lease.
func (l *redisLease) Renew(ctx context.Context, now time.Time) error {
	if l.s.closed.Load() {
		return errClosed
	}
	res, err := l.s.leaseCall(ctx, now, l.key, "renew", l.id, "0", l.ttl)
	if err != nil {
		return fmt.Errorf("redisstore: renew lease %s of %q: %w", l.id, l.key, err)
	}
	if n, err := res.AsInt64(); err != nil || n != 1 {
		return fmt.Errorf("redisstore: lease %s of %q: %w", l.id, l.key, portero.ErrLeaseLost)
	}
	return nil
}

// Release implements portero.Lease. Pass a context that has not ended
// (context.WithoutCancel of a request's): the call is bounded by
// Config.Timeout.
func (l *redisLease) Release(ctx context.Context) error {
	if l.s.closed.Load() {
		return errClosed
	}
	if _, err := l.s.leaseCall(ctx, time.Time{}, l.key, "release", l.id, "0", "0"); err != nil {
		return fmt.Errorf("redisstore: release lease %s of %q: %w", l.id, l.key, err)
	}
	return nil
}
