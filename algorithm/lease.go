package algorithm

import (
	"time"

	"github.com/portero-rl/portero"
)

// Leases is the state of one concurrency limit (portero.ConcurrencyRule)
// under one key: the leases held and the instant (Unix ns) each expires. A
// lease has expired when its expiry is at or before now; an expired lease
// holds no slot, so the set never needs a sweeper to be exact: every
// Acquire first drops what has expired. The zero value holds no lease. It is
// not safe for concurrent use: a store locks around it. The Redis store's
// lease script (a sorted set of lease ids scored by expiry) makes the same
// decisions; store/storetest.RunLeases checks both against it.
//
// ID is the type of the lease identifiers, unique per lease (the memory
// store counts them, the Redis store makes strings).
type Leases[ID comparable] struct {
	exp map[ID]int64
	// soon is a lower bound on the earliest expiry (exact after a scan):
	// no lease can have expired before it, so Acquire scans only when
	// now reaches it. Renew and Release keep it a lower bound.
	soon int64
}

// Len returns the number of leases held, expired ones that no call has
// dropped yet included.
func (l *Leases[ID]) Len() int { return len(l.exp) }

// Expire drops the leases expired at now and returns how many are left.
func (l *Leases[ID]) Expire(now int64) int {
	if len(l.exp) == 0 || now < l.soon {
		return len(l.exp)
	}
	first := true
	for id, e := range l.exp {
		if e <= now {
			delete(l.exp, id)
			continue
		}
		if first || e < l.soon {
			l.soon, first = e, false
		}
	}
	return len(l.exp)
}

// Acquire drops the leases expired at now and, when fewer than max are
// left, adds id expiring at now + ttl. The decision is that of
// portero.LeaseStore.Acquire: Limit max, Remaining the slots still free;
// when refused, RetryAfter is the time until the earliest lease expires.
// ttl must be positive and id not held already.
func (l *Leases[ID]) Acquire(id ID, now int64, ttl time.Duration, max int64) portero.Decision {
	n := int64(l.Expire(now))
	if n >= max {
		earliest := int64(0)
		for _, e := range l.exp {
			if earliest == 0 || e < earliest {
				earliest = e
			}
		}
		l.soon = earliest
		return portero.Decision{Limit: max, RetryAfter: time.Duration(earliest - now)}
	}
	e := now + int64(ttl)
	if l.exp == nil {
		l.exp = make(map[ID]int64, 1)
	}
	if n == 0 || e < l.soon {
		l.soon = e
	}
	l.exp[id] = e
	return portero.Decision{Allowed: true, Limit: max, Remaining: max - n - 1}
}

// Renew extends id to now + ttl, never shortening it, and reports whether
// it was still held; a lease that has expired at now (or was released) is
// dropped and not taken back.
func (l *Leases[ID]) Renew(id ID, now int64, ttl time.Duration) bool {
	e, ok := l.exp[id]
	if !ok || e <= now {
		delete(l.exp, id)
		return false
	}
	l.exp[id] = max(e, now+int64(ttl))
	return true
}

// Release drops id and reports whether it was held (expired or not).
func (l *Leases[ID]) Release(id ID) bool {
	_, ok := l.exp[id]
	delete(l.exp, id)
	return ok
}
