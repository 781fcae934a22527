package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/portero-rl/portero"
)

// Concurrency limits count what has not finished: a hit of a concurrency
// rule takes a lease, which the door gives back when the request ends
// (Verdict.Held). Admit decides them with the rate hits, all or nothing:
// the leases first, then the rate hits, and a refusal by either gives the
// leases back and counts no rate. A lease store that fails meets the same
// failure policy: FailAllow admits without a lease, FailDeny refuses,
// FailLocal takes the lease in the engine's memory with LocalShare of Max,
// FailError makes Admit return the error.

// Held is a lease an admitted verdict holds, which the door renews while
// the request runs and gives back however it ends.
type Held struct {
	Rule  *Rule
	Key   string
	Lease portero.Lease
}

// Held returns the leases v holds, in hit order; the slice is reused by
// the next decision.
func (v *Verdict) Held() []Held { return v.held }

// leaseHit checks hit i of a concurrency rule.
func leaseHit(h *Hit, i int, leases bool) error {
	switch {
	case !leases:
		return fmt.Errorf("%w: hit %d: rule %q is a concurrency limit: decide it with Admit, which hands its lease to the door", ErrInvalidHit, i, h.Rule.Name)
	case h.CheckOnly:
		return fmt.Errorf("%w: hit %d: rule %q is a concurrency limit: a lease cannot be only looked at", ErrInvalidHit, i, h.Rule.Name)
	case h.Cost != 1:
		return fmt.Errorf("%w: hit %d: rule %q: cost %d: a concurrency hit is one request in flight", ErrInvalidHit, i, h.Rule.Name, h.Cost)
	}
	return nil
}

// Admit is Decide for hits among which concurrency rules' may be: each
// takes a lease, in hit order, until the first enforced refusal (the rate
// hits are then only looked at); a refusal gives every lease back before
// Admit returns, and an admitted verdict holds them (Verdict.Held). A
// refused concurrency hit's RetryAfter is at most Options.LeaseRetryAfter.
// After an error v holds no verdict and no lease.
func (e *Engine) Admit(ctx context.Context, now time.Time, hits []Hit, v *Verdict) error {
	leases := false
	for i := range hits {
		if r := hits[i].Rule; r != nil && r.IsConcurrency() {
			leases = true
			break
		}
	}
	if !leases {
		return e.Decide(ctx, now, hits, v)
	}
	v.reuse()
	if err := v.load(hits, true); err != nil {
		return err
	}
	if e.leases == nil {
		v.Reset()
		return errors.New("engine: the store keeps no leases (it is no portero.LeaseStore): concurrency rules cannot be admitted")
	}
	if e.counting == CountEach {
		v.Reset() // envoyproxy/ratelimit has no concurrency limit
		return errors.New("engine: concurrency rules cannot be admitted under CountEach")
	}
	for i := range v.Results {
		res := &v.Results[i]
		if !res.Rule.IsConcurrency() {
			continue
		}
		if v.blocked {
			res.Decision, res.Outcome = portero.Decision{Limit: res.Rule.Concurrency.Max}, NotCounted
			continue
		}
		if err := e.acquire(ctx, now, v, i); err != nil {
			e.giveBack(ctx, v)
			v.Reset()
			return err
		}
	}
	if err := e.run(ctx, now, v); err != nil {
		e.giveBack(ctx, v)
		v.Reset()
		return err
	}
	if !v.Allowed {
		e.giveBack(ctx, v)
	}
	return nil
}

// acquire takes the lease of concurrency hit i, or has the failure policy
// decide it.
func (e *Engine) acquire(ctx context.Context, now time.Time, v *Verdict, i int) error {
	res := &v.Results[i]
	r := res.Rule
	lease, d, err := e.leases.Acquire(ctx, now, r.Concurrency, res.Key)
	if err != nil {
		if lease != nil {
			_ = lease.Release(context.WithoutCancel(ctx))
		}
		if !errors.Is(err, portero.ErrStoreUnavailable) {
			err = fmt.Errorf("%w: %w", portero.ErrStoreUnavailable, err)
		}
		cause := err
		if lease, d, err = e.leaseFailure(ctx, now, r, res.Key, cause); err != nil {
			return err
		}
		res.Failure = e.onError
		if v.Degraded == nil {
			v.Degraded = cause
		}
	}
	res.Decision = d
	switch {
	case d.Allowed:
		res.Outcome = Allowed
		if float64(d.Limit-d.Remaining) >= e.near*float64(d.Limit) && res.Failure == "" {
			res.Outcome = NearLimit
		}
		if lease != nil {
			v.held = append(v.held, Held{Rule: r, Key: res.Key, Lease: lease})
		}
	case r.Shadow:
		res.Outcome = ShadowRefused
	default:
		res.Outcome = Refused
		v.blocked = true
	}
	if !d.Allowed && (res.Decision.RetryAfter <= 0 || res.Decision.RetryAfter > e.leaseRetry) {
		res.Decision.RetryAfter = e.leaseRetry
	}
	return nil
}

// leaseFailure decides a concurrency hit that the lease store could not,
// by the failure policy; cause wraps portero.ErrStoreUnavailable.
func (e *Engine) leaseFailure(ctx context.Context, now time.Time, r *Rule, key string, cause error) (portero.Lease, portero.Decision, error) {
	max := r.Concurrency.Max
	switch e.onError {
	case portero.FailError:
		return nil, portero.Decision{}, fmt.Errorf("engine: concurrency rule %q: %w", r.Name, cause)
	case portero.FailLocal:
		cr := r.Concurrency
		if e.local.share < 1 {
			cr.Max = int64(math.Max(1, math.Floor(float64(max)*e.local.share)))
		}
		lease, d, err := e.local.mem.Acquire(ctx, now, cr, key)
		if err != nil {
			return nil, portero.Decision{}, fmt.Errorf("engine: concurrency rule %q: the store failed (%w) and so did the local fallback: %v", r.Name, cause, err)
		}
		return lease, d, nil
	case portero.FailDeny:
		return nil, portero.Decision{Limit: max, RetryAfter: e.retry}, nil
	}
	return nil, portero.Decision{Allowed: true, Limit: max}, nil
}

// giveBack releases the leases of a refused (or failed) v; each hit becomes
// NotCounted.
func (e *Engine) giveBack(ctx context.Context, v *Verdict) {
	if len(v.held) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, h := range v.held {
		_ = h.Lease.Release(ctx)
	}
	for i := range v.Results {
		res := &v.Results[i]
		if res.Rule.IsConcurrency() && res.Decision.Allowed && res.Outcome != NotCounted {
			untaken(&res.Decision, 1)
			res.Outcome = NotCounted
		}
	}
	clear(v.held)
	v.held = v.held[:0]
}
