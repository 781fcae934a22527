package memstore

import (
	"context"
	"sync/atomic"
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
	if t.log == nil {
		t.update(key, now, func(st algorithm.State, found bool) (algorithm.State, bool) {
			st, changed, _ := algorithm.AdjustState(t.dec, st, found, now, at, delta) // checked by Adjust
			return st, changed
		})
		return
	}
	h := t.hash(key)
	sh := t.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := sh.logs[h]
	if l == nil {
		if len(sh.logs) >= sh.max {
			sh.evictLog(now, t.log)
		}
		l = new(algorithm.Log)
		sh.logs[h] = l
	}
	t.log.Charge(l, now, delta)
}

// update replaces key's fixed-size state with f's under the shard's lock;
// f reports whether it changed it. A one-word state may change meanwhile
// by lock-free decisions: f then runs again on what they left, so that
// it applies by compare-and-swap, as decideLocked does.
func (t *table) update(key string, now int64, f func(st algorithm.State, found bool) (algorithm.State, bool)) {
	h := t.hash(key)
	sh := t.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a, i := sh.find(h)
	if i >= 0 && t.word != nil {
		for {
			v := atomic.LoadUint64(&a.w[i+1])
			st, changed := f(algorithm.State{A: int64(v)}, true)
			if !changed || atomic.CompareAndSwapUint64(&a.w[i+1], v, uint64(word(st.A))) {
				return
			}
		}
	}
	var st algorithm.State
	if i >= 0 {
		st = a.state(i)
	}
	st, changed := f(st, i >= 0)
	switch {
	case !changed:
	case i >= 0:
		a.set(i, st)
	default:
		sh.insert(h, st, now, t.dec)
	}
}
