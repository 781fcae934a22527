// Package portero is the vocabulary of the Portero rate limiter, shared by
// every layer: a Limit (how much, over what time), an Algorithm (how it is
// counted), the Rule, Hit and Decision of one request, the Store, Limiter
// and LeaseStore interfaces, the FailurePolicy and the sentinel errors.
//
// Portero is the doorman in front of a service: for every request it asks
// "has this client used its share?", lets it in or turns it away, and tells
// the client when to come back. A refused request is a Decision with
// Allowed false, not an error; an error means bad input or a failing store.
// This package imports only the standard library; the algorithms live in
// package algorithm, the keyed state in store/memstore and
// store/redisstore, the decisions in package engine.
package portero

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Errors returned by Portero wrap one of these with %w, so
// callers can test with errors.Is.
var (
	// ErrInvalidLimit reports a limit that cannot be enforced: a count,
	// window, burst or rate that is zero, negative, NaN or infinite, or a
	// combination too large to represent.
	ErrInvalidLimit = errors.New("invalid limit")
	// ErrInvalidCost reports a cost of zero or less.
	ErrInvalidCost = errors.New("invalid cost")
	// ErrCostExceedsLimit reports a cost larger than the limit or the
	// bucket: a request that could never be admitted.
	ErrCostExceedsLimit = errors.New("cost exceeds limit")
	// ErrUnknownAlgorithm reports an algorithm name that Portero does not know.
	ErrUnknownAlgorithm = errors.New("unknown algorithm")
	// ErrClosed reports a call on a store or limiter after Close.
	ErrClosed = errors.New("limiter closed")
	// ErrStoreUnavailable reports a backend (such as Redis) that failed to
	// answer; the failure policy decides what happens next.
	ErrStoreUnavailable = errors.New("store unavailable")
	// ErrNotAdjustable reports an adjustment (Adjuster) that a rule's
	// algorithm cannot make: a refund on the sliding log, a charge on the
	// leaky queue.
	ErrNotAdjustable = errors.New("cannot be adjusted")
)

// Decision is the verdict for one request. The zero value is a refusal with
// no information.
type Decision struct {
	// Allowed reports whether the request may pass. For a queue (leaky
	// bucket as a shaper) it means "queued": the request passes after Delay.
	Allowed bool
	// Limit is the number of cost units the rule admits: the count L per
	// window for window algorithms, the burst (bucket capacity, queue size)
	// for the buckets, GCRA and the queue.
	Limit int64
	// Remaining is how many more cost-1 requests would be admitted right now,
	// after this decision. Never negative.
	Remaining int64
	// RetryAfter is zero when Allowed; otherwise the shortest wait after which
	// the same request would be admitted if no other request came.
	RetryAfter time.Duration
	// ResetAfter is how long until the key's state has returned to "full":
	// all of Limit available again if no other request came.
	ResetAfter time.Duration
	// Delay is, for a queue (leaky-queue), how long an admitted request waits
	// before it departs; zero for every other algorithm.
	Delay time.Duration
	// Quota reports a calendar quota's decision (a Limit with a Period): a
	// refusal then means that the key has spent its quota for the period,
	// not that it goes too fast, and RetryAfter is the time to the next
	// period boundary. A door tells the two refusals apart with it.
	Quota bool
	// PeriodLeft is, for a calendar quota, the time from now to the end of
	// the period the key is counted in, when the whole quota comes back,
	// whether or not any of it is used; zero for other limits.
	PeriodLeft time.Duration
}

// Limiter decides for keys under one rule (an algorithm and a limit).
// Implementations are safe for concurrent use.
type Limiter interface {
	// AllowN reports whether a request of the given cost from key may pass at
	// instant now, and if so counts it. A refusal is a Decision with Allowed
	// false, not an error; errors mean bad input (ErrInvalidCost,
	// ErrCostExceedsLimit) or a failing store.
	AllowN(ctx context.Context, key string, now time.Time, cost int64) (Decision, error)
}
