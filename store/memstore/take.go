package memstore

import (
	"context"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

var _ portero.Taker = (*Store)(nil)

// Take implements portero.Taker with algorithm.Take, under the key's shard
// lock (for GCRA by compare-and-swap, as a decision). Errors wrap
// portero.ErrClosed, portero.ErrInvalidCost, portero.ErrCostExceedsLimit,
// or portero.ErrInvalidLimit for a rule that cannot lease
// (portero.Leasable). ctx is not consulted.
func (s *Store) Take(_ context.Context, now time.Time, rule portero.Rule, key string, need, want int64) (int64, portero.Decision, error) {
	if s.closed.Load() {
		return 0, portero.Decision{}, errClosed
	}
	t, err := s.table(rule)
	if err != nil {
		return 0, portero.Decision{}, err
	}
	if err := algorithm.CheckTake(t.rule, need, want, t.max); err != nil {
		return 0, portero.Decision{}, err
	}
	var took int64
	var d portero.Decision
	t.update(key, now.UnixNano(), func(st algorithm.State, found bool) (algorithm.State, bool) {
		st, took, d = algorithm.Take(t.dec, st, found, now.UnixNano(), need, want)
		return st, took > 0
	})
	return took, d, nil
}
