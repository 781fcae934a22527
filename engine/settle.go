package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Adjustment is one settlement after a response: Delta units charged to
// (positive) or refunded from (negative, of the decision at At) what Key
// has used under Rule (policy.Policy.Settle builds them).
type Adjustment struct {
	Rule  *Rule
	Key   string
	Delta int64
	At    time.Time
}

// Settle applies adjustments at instant now, after the responses of
// requests decided earlier (a reservation settled, a matching response
// charged), through the store's portero.Adjuster; it decides nothing. When
// the store fails, FailLocal settles in the engine's memory and every
// other policy drops the settlement, returning an error wrapping
// portero.ErrStoreUnavailable. Errors also wrap portero.ErrNotAdjustable
// and ErrInvalidHit. A rule counted after the response admits at most its
// limit plus the requests in flight when it was reached (docs/plans.md).
func (e *Engine) Settle(ctx context.Context, now time.Time, adj []Adjustment) error {
	if len(adj) == 0 {
		return nil
	}
	pa := make([]portero.Adjustment, 0, len(adj))
	for i, a := range adj {
		if a.Rule == nil || !a.Rule.compiled {
			return fmt.Errorf("%w: adjustment %d: no rule built with engine.NewRule", ErrInvalidHit, i)
		}
		if a.Delta == 0 || a.Rule.maxCost == 0 {
			continue
		}
		pa = append(pa, portero.Adjustment{Rule: a.Rule.Rule, Key: a.Key, Delta: a.Delta, At: a.At})
	}
	if len(pa) == 0 {
		return nil
	}
	st, ok := e.store.(portero.Adjuster)
	if !ok {
		return fmt.Errorf("engine: %T: %w: the store cannot settle", e.store, portero.ErrNotAdjustable)
	}
	err := st.Adjust(ctx, now, pa)
	if err == nil || errors.Is(err, portero.ErrNotAdjustable) {
		return err
	}
	if !errors.Is(err, portero.ErrStoreUnavailable) {
		err = fmt.Errorf("%w: %w", portero.ErrStoreUnavailable, err)
	}
	if e.local != nil {
		for i := range pa {
			pa[i].Rule = e.local.rule(pa[i].Rule)
		}
		if lerr := e.local.mem.Adjust(ctx, now, pa); lerr != nil {
			return fmt.Errorf("engine: the store failed (%w) and so did the local settlement: %v", err, lerr)
		}
		return nil
	}
	return fmt.Errorf("engine: settlement dropped: %w", err)
}

// Refunds appends to adj the refunds of what admitted verdict v, decided at
// at, counted: for a request that ends before it runs (its client left
// while a queue held it), so that it counts in no rule. Leases (the
// Keeper's), hits the failure policy decided, and a sliding log's, which
// cannot be refunded, are not among them. Settle applies them.
func (v *Verdict) Refunds(at time.Time, adj []Adjustment) []Adjustment {
	for i := range v.Results {
		res := &v.Results[i]
		if res.Outcome != Allowed && res.Outcome != NearLimit || res.Failure != "" || res.Rule.IsConcurrency() {
			continue
		}
		if _, ok := algorithm.CanAdjust(res.Rule.Algorithm); ok {
			adj = append(adj, Adjustment{Rule: res.Rule, Key: res.Key, Delta: -res.Cost, At: at})
		}
	}
	return adj
}

// Peek writes into v, without counting anything, the verdict of hits made
// check-only, marked Verdict.Look: what a door answers "how much have I
// left?" with (GET /v1/limits, /api/keys), under the failure policy.
func (e *Engine) Peek(ctx context.Context, now time.Time, hits []Hit, v *Verdict) error {
	look := make([]Hit, len(hits))
	for i, h := range hits {
		h.CheckOnly = true
		look[i] = h
	}
	err := e.Decide(ctx, now, look, v)
	v.Look = err == nil
	return err
}
