package portero

import (
	"context"
	"fmt"
	"time"
)

// Rule is an algorithm with a limit under a name: what a store needs to
// decide for keys. Rules with equal fields share state in a store, so a
// reload that leaves a rule unchanged keeps its counters.
type Rule struct {
	// Name identifies the rule in decisions, headers and metrics.
	Name      string
	Algorithm Algorithm
	Limit     Limit
	// Budget, when positive, serves the rule from leased budgets
	// (store/budget): each instance takes units from the shared state in
	// batches sized for about Budget of its own traffic, and spends them
	// from memory. Stores other than store/budget decide as if it were
	// zero.
	Budget time.Duration
}

// Validate reports why r cannot be enforced.
func (r Rule) Validate() error {
	if _, err := ParseAlgorithm(string(r.Algorithm)); err != nil {
		return fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if err := r.Limit.ValidateFor(r.Algorithm); err != nil {
		return fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return r.checkBudget()
}

// Hit is one rule applied to one key with a cost.
type Hit struct {
	Rule Rule
	Key  string
	Cost int64
	// MaxDelay, when positive, bounds a leaky-queue hit's Delay: a hit
	// whose departure would come later than MaxDelay after now is refused,
	// as by a full queue, with the RetryAfter after which it would depart
	// within MaxDelay. Other algorithms ignore it.
	MaxDelay time.Duration
}

// Store keeps the state of many rules and keys. Implementations
// (store/memstore, store/redisstore) are safe for concurrent use.
type Store interface {
	// AllowAll decides every hit at instant now, all-or-nothing: when any
	// hit is refused, none is counted. It returns one decision per hit, in
	// order, each seeing the state the earlier hits of the call would leave
	// (two hits on one rule and key add up). In a refused call an Allowed
	// decision means "this hit alone would have passed". A store decides
	// or returns an error (bad input, a failing backend), never both: the
	// failure policy that answers then is the caller's.
	AllowAll(ctx context.Context, now time.Time, hits []Hit) ([]Decision, error)
	// Peek returns what a request of cost from key under rule would get
	// at instant now, without counting it (algorithm.Look): Allowed,
	// RetryAfter and Delay as AllowAll would decide that one hit, Remaining
	// and ResetAfter as they stand before it, so that what a client is told
	// equals what its next request gets. Nothing observable changes; errors
	// are those of AllowAll.
	Peek(ctx context.Context, rule Rule, key string, now time.Time, cost int64) (Decision, error)
	// Close releases the store and stops every goroutine it started.
	Close(ctx context.Context) error
}

// Adjustment changes, after the fact, what a key has used under a rule:
// the settlement of a request whose cost was known only after its
// response (a reservation settled: the difference charged or refunded),
// or the charge of a request counted only when its response matched.
type Adjustment struct {
	Rule Rule
	Key  string
	// Delta is the change in units: positive charges Delta units at the
	// call's instant, unconditionally (the request has happened; the key
	// may end up over its limit, never more than twice over); negative
	// refunds −Delta units taken by the decision at At, as if they had
	// never been taken, while they still count (see package algorithm).
	Delta int64
	// At is the instant of the decision whose units a refund gives back.
	At time.Time
}

// Adjuster is implemented by the stores that can settle (store/memstore,
// store/redisstore). The engine calls it (engine.Engine.Settle).
type Adjuster interface {
	// Adjust applies each adjustment at instant now, in order. It decides
	// nothing and refuses nothing. A rule whose algorithm cannot make an
	// adjustment (a refund on the sliding log, a charge on the queue) is
	// an error wrapping ErrNotAdjustable, checked before anything changes;
	// errors are otherwise those of AllowAll.
	Adjust(ctx context.Context, now time.Time, adj []Adjustment) error
}

// Count is one operation on a plain counter of a clock-aligned window, as
// envoyproxy/ratelimit keeps them (Redis INCRBY, then EXPIRE): Add is
// added whatever the counter holds, and Value is what it holds after.
type Count struct {
	// Key names the counter without its window; the store adds the
	// window's start (Unix seconds of the instant rounded down to a
	// multiple of Window), so that a new window is a new counter.
	Key string
	// Window is the counter's window, a whole number of seconds.
	Window time.Duration
	// Add is added to the counter; 0 reads it.
	Add uint64
	// TTL is how long the counter lives after this operation (at least
	// Window; envoyproxy/ratelimit adds a random jitter).
	TTL time.Duration
	// Value is the counter after the operation, set by Counter.Count.
	Value uint64
}

// Counter is implemented by stores that keep plain counters natively
// (store/redisstore, with envoyproxy/ratelimit's own keys). The engine
// counts on any other store through its algorithms (see engine.CountEach).
type Counter interface {
	// Count applies counts in order at instant now (two on one key add
	// up) and sets each one's Value. Errors are those of AllowAll: on an
	// error no Value is meaningful (some counts may have been applied).
	Count(ctx context.Context, now time.Time, counts []Count) error
}
