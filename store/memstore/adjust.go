package memstore

import (
	"context"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

var _ portero.Adjuster = (*Store)(nil)

// Adjust implements portero.Adjuster: it settles each adjustment in turn,
// under its shard's lock, with the algorithm's own adjustment
// (algorithm.Adjuster; algorithm.SlidingLog.Charge for the log). An
// adjustment the rule's algorithm cannot make fails the whole call before
// anything changes (portero.ErrNotAdjustable). ctx is not consulted.
func (s *Store) Adjust(_ context.Context, now time.Time, adj []portero.Adjustment) error {
	if s.closed.Load() {
		return errClosed
	}
	var buf [4]*table
	tables := buf[:0]
	for _, a := range adj {
		t, err := s.table(a.Rule)
		if err != nil {
			return err
		}
		if err := algorithm.CheckAdjust(a.Rule, a.Delta); err != nil {
			return err
		}
		tables = append(tables, t)
	}
	ns := now.UnixNano()
	for i, a := range adj {
		if a.Delta != 0 {
			tables[i].adjust(a.Key, ns, a.At.UnixNano(), a.Delta)
		}
	}
	return nil
}

func (t *table) adjust(key string, now, at, delta int64) {
	h := t.hash(key)
	sh := t.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t.log != nil {
		l := sh.logs[h]
		if l == nil {
			if len(sh.logs) >= sh.max {
				sh.evictLog(now, t.log)
			}
			l = new(algorithm.Log)
			sh.logs[h] = l
		}
		t.log.Charge(l, now, delta)
		return
	}
	var st algorithm.State
	i := sh.find(h)
	if i >= 0 {
		st = sh.slots[i].s
	}
	st, changed, _ := algorithm.AdjustState(t.dec, st, i >= 0, now, at, delta) // checked by Adjust
	switch {
	case !changed:
	case i >= 0:
		sh.slots[i].s = st
	default:
		sh.insert(h, st, now, t.dec)
	}
}
