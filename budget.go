package portero

import (
	"context"
	"fmt"
	"time"
)

// Leased budgets. A rule with a Budget is served, on each instance, from
// units the instance takes from the rule's shared state in one atomic call
// and spends from its own memory (store/budget): the shared count stays
// exact, since nothing is admitted that was not taken from it, and the
// store sees one call per batch instead of one per request. The price is
// early refusals: an instance refuses when its budget is spent and the
// shared state has nothing left to take, while other instances may still
// hold units they have not spent. See docs/distributed.md.

// MaxBudget is the longest Rule.Budget.
const MaxBudget = time.Minute

// BudgetLife is how many Budget intervals a batch lives at most: the T of
// the bounds in docs/distributed.md (4 × 50 ms = 200 ms).
const BudgetLife = 4

// Leasable reports whether rules of algorithm alg can be served from
// leased budgets: the fixed windows (clock-aligned, anchored, calendar
// quotas), whose batches live within their window, and the token bucket,
// the leaky meter and GCRA, whose units leave the shared bucket when they
// are taken. The sliding log, the sliding counter and the leaky queue
// decide each request where it happens (its instant, its place) and
// cannot.
func Leasable(alg Algorithm) bool {
	switch alg {
	case FixedWindow, FixedWindowAnchored, TokenBucket, LeakyMeter, GCRA:
		return true
	}
	return false
}

// checkBudget reports why r's Budget cannot be served.
func (r Rule) checkBudget() error {
	switch {
	case r.Budget == 0:
		return nil
	case r.Budget < time.Millisecond || r.Budget > MaxBudget:
		return fmt.Errorf("rule %q: %w: budget %v: want 1ms to %v", r.Name, ErrInvalidLimit, r.Budget, MaxBudget)
	case !Leasable(r.Algorithm):
		return fmt.Errorf("rule %q: %w: budget: %s cannot lease budgets; only fixed-window (clock-aligned, anchored or a calendar quota), token-bucket, leaky-meter and gcra can",
			r.Name, ErrInvalidLimit, r.Algorithm)
	}
	return nil
}

// BudgetLifetime returns T, the longest a batch of r's units lives:
// BudgetLife × r.Budget.
func (r Rule) BudgetLifetime() time.Duration { return BudgetLife * r.Budget }

// Taker is implemented by the stores that hand out budgets
// (store/memstore, store/redisstore); store/budget spends them. A rule's
// Budget is for store/budget: a Taker decides and takes as if it were
// zero.
type Taker interface {
	// Take takes between need and want units (1 ≤ need ≤ want) of rule's
	// state for key at instant now, in one atomic step, and returns how
	// many it took: as many as the state admits now, but beyond need at
	// most an eighth of what it has left (algorithm.Grant), so that
	// batches shrink as the state runs low, down to need; 0 when fewer
	// than need are left, and then nothing is taken. The Decision is the
	// state's after the take (Remaining what is left to take, ResetAfter
	// and, for a calendar quota, PeriodLeft as after a request of the
	// units taken), or, when nothing was taken, the refusal of a request
	// of need (RetryAfter until it would pass). Errors are those of
	// Store.AllowAll for a hit of cost need.
	Take(ctx context.Context, now time.Time, rule Rule, key string, need, want int64) (int64, Decision, error)
}
