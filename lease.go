package portero

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultLeaseTTL is the lease lifetime of a ConcurrencyRule whose TTL is
// zero: how long a slot stays taken after its holder stops renewing (a
// crashed instance, a lost connection to Redis).
const DefaultLeaseTTL = 10 * time.Second

// MinLeaseTTL is the shortest lease lifetime a ConcurrencyRule may ask for.
const MinLeaseTTL = time.Millisecond

// ErrLeaseLost reports a lease that expired before it was renewed: its slot
// may already belong to another request. Lease.Renew returns errors that
// wrap it.
var ErrLeaseLost = errors.New("lease lost")

// ConcurrencyRule limits how many requests may be in flight at once under a
// name. Where a rate limit counts what arrived, a concurrency limit counts
// what has not finished: it admits at most Max/S requests per second when
// each takes S seconds, tightening when the service slows (Little's law).
// A store keeps a rule's leases under its Name and the key, so a reload
// that changes Max or TTL keeps the leases held.
type ConcurrencyRule struct {
	// Name identifies the rule in decisions, headers and failure policies.
	Name string
	// Max is C, the most leases held at once under one key. Required.
	Max int64
	// TTL is how long a lease lives without renewal, at least MinLeaseTTL;
	// 0 means DefaultLeaseTTL. Holders renew well within it (httplimit
	// renews every TTL/3); a holder that dies leaks its slot for at most
	// TTL.
	TTL time.Duration
}

// LeaseTTL returns r.TTL, or DefaultLeaseTTL when it is zero.
func (r ConcurrencyRule) LeaseTTL() time.Duration {
	if r.TTL == 0 {
		return DefaultLeaseTTL
	}
	return r.TTL
}

// Validate reports why r cannot be enforced, wrapping ErrInvalidLimit.
func (r ConcurrencyRule) Validate() error {
	switch {
	case r.Name == "":
		return fmt.Errorf("concurrency rule: %w: name: required", ErrInvalidLimit)
	case r.Max <= 0:
		return fmt.Errorf("concurrency rule %q: %w: max %d: must be positive", r.Name, ErrInvalidLimit, r.Max)
	case r.TTL < 0 || (r.TTL > 0 && r.TTL < MinLeaseTTL):
		return fmt.Errorf("concurrency rule %q: %w: ttl %v: want at least %v (0 for %v)", r.Name, ErrInvalidLimit, r.TTL, MinLeaseTTL, DefaultLeaseTTL)
	case r.TTL > 24*time.Hour:
		return fmt.Errorf("concurrency rule %q: %w: ttl %v: at most 24h", r.Name, ErrInvalidLimit, r.TTL)
	}
	return nil
}

// Lease is one slot of a concurrency limit, held from a successful Acquire
// until Release or until it expires. Implementations are safe for
// concurrent use.
type Lease interface {
	// Renew extends the lease to now + the rule's TTL (never shortening
	// it). It returns an error wrapping ErrLeaseLost when the lease expired
	// (its expiry was at or before now) or was released: the slot is gone
	// and Renew does not take it back. Other errors mean a failing backend;
	// the lease then runs out at its old expiry unless a later Renew
	// succeeds.
	Renew(ctx context.Context, now time.Time) error
	// Release gives the slot back at once. Releasing a lease twice, or one
	// that has expired, is harmless and returns nil; an error means the
	// backend could not be told, and the slot comes back when the lease
	// expires.
	Release(ctx context.Context) error
}

// LeaseStore hands out the leases of concurrency limits. store/memstore and
// store/redisstore implement it; store/storetest.RunLeases is the
// conformance suite both pass.
type LeaseStore interface {
	// Acquire takes one slot of rule under key at instant now, when fewer
	// than rule.Max unexpired leases are held there (a lease has expired
	// when its expiry is at or before now). The Decision's Limit is
	// rule.Max and Remaining the slots still free after this call; when
	// refused, the Lease is nil and RetryAfter is the time until the
	// earliest held lease expires: the latest a slot comes back if no
	// holder releases or renews (holders usually release far sooner, so
	// doors answer with a hint of their own). ResetAfter is zero: when the
	// leases end is up to their holders.
	//
	// A refusal is a Decision with Allowed false, not an error. Errors mean
	// an invalid rule or a failing backend; a store with a failure policy
	// may then return a refused Decision and an error wrapping
	// ErrStoreUnavailable (fail closed), or a lease it holds elsewhere.
	Acquire(ctx context.Context, now time.Time, rule ConcurrencyRule, key string) (Lease, Decision, error)
}
