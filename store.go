package portero

import (
	"context"
	"fmt"
	"time"
)

// Rule is an algorithm with a limit under a name: what a store needs in
// order to decide for keys. Two rules with equal fields share state in a
// store; changing any field starts fresh counters (which is why a reload
// that leaves a rule unchanged keeps its counters).
type Rule struct {
	// Name identifies the rule in decisions, headers and metrics.
	Name      string
	Algorithm Algorithm
	Limit     Limit
}

// Validate reports why r cannot be enforced.
func (r Rule) Validate() error {
	if _, err := ParseAlgorithm(string(r.Algorithm)); err != nil {
		return fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if err := r.Limit.ValidateFor(r.Algorithm); err != nil {
		return fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return nil
}

// Hit is one rule applied to one key with a cost.
type Hit struct {
	Rule Rule
	Key  string
	Cost int64
}

// Store keeps the state of many rules and keys. Implementations
// (store/memstore, store/redisstore) are safe for concurrent use.
type Store interface {
	// AllowAll decides every hit at instant now, all-or-nothing: when any
	// hit is refused, none of them is counted. It returns one decision per
	// hit, in order. The hits are decided in order, each seeing the state
	// the earlier hits of the same call would leave (two hits on one rule
	// and key add up; for the sliding log see algorithm.SlidingLog's
	// DecideAfter). In a refused call an Allowed decision beside a refused
	// one means "this hit alone would have passed", with the Remaining it
	// would have left. Errors mean bad input or a failing backend: a store
	// either decides or returns an error, never both (the failure policy
	// that answers instead is the caller's, see FailurePolicy).
	AllowAll(ctx context.Context, now time.Time, hits []Hit) ([]Decision, error)
	// Peek returns the decision a request of cost 1 from key under rule
	// would get at instant now, without counting it: the Decision AllowAll
	// would return for that one hit, with Allowed saying whether it would
	// pass and Remaining what it would leave. A key with no state answers
	// as a fresh one. Nothing observable changes. Errors are those of
	// AllowAll; a store never answers a Peek it could not make.
	Peek(ctx context.Context, rule Rule, key string, now time.Time) (Decision, error)
	// Close releases the store and stops every goroutine it started.
	Close(ctx context.Context) error
}
