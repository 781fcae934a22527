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
// (positive) or refunded from (negative) what Key has used under Rule; a
// refund gives back units of the decision made at At. A compiler builds
// them from the verdict and the response (policy.Policy.Settle).
type Adjustment struct {
	Rule  *Rule
	Key   string
	Delta int64
	At    time.Time
}

// Settle applies adjustments at instant now, after the responses of
// requests the engine decided earlier: a reservation settled (the
// difference between the estimate counted at the decision and the cost
// the response reported, charged or refunded), or a request counted only
// because its response matched (a failed login), charged. It decides and
// refuses nothing: the next decisions see the adjusted counts. The store
// must implement portero.Adjuster (store/memstore and store/redisstore
// do). When the store fails, FailLocal settles in the engine's own memory
// (where the decisions are then made); every other policy drops the
// settlement and returns the error, wrapping portero.ErrStoreUnavailable,
// for the door to count. Errors also wrap portero.ErrNotAdjustable (the
// rule's algorithm cannot make the adjustment) and ErrInvalidHit.
//
// Under concurrency a settlement comes after the decisions of the requests
// still in flight: a rule counted after the response admits at most its
// limit plus the requests in flight when it was reached, since each of
// them was admitted while the count was below the limit (see
// docs/plans.md).
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

// Refunds appends to adj the refunds that give back what admitted verdict
// v, decided at at, counted: for a request that ends before it runs (its
// client left while a queue held it), so that it counts in no rule, as a
// refused request. Leases are not among them (the door's Keeper releases
// them), nor hits the failure policy decided (the store counted nothing),
// nor a sliding log's, which cannot be refunded (it keeps the instant of
// every unit). Settle applies them.
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

// Peek looks at hits at instant now without counting any of them, and
// writes into v the verdict a request would get if they were all
// check-only: each hit's decision says what is available now, and
// Verdict.Look is set. It is what a door answers "how much have I left?"
// with (the gateway's GET /v1/limits). The failure policy applies as for
// Decide.
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
