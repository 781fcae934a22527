package fleetsim

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/budget"
	"github.com/portero-rl/portero/store/memstore"
)

// base is the virtual clock's start, on a whole second.
var base = time.Unix(1_800_000_000, 0)

// fleet is one mode's run: the stores and what was admitted per window.
type fleet struct {
	cfg       Config
	mode      string
	sh        *memstore.Store
	insts     []*budget.Store // leased mode only
	hot, cold portero.Rule
	// hotIn[w] is the hot key's units admitted fleet-wide in window w,
	// coldIn[k][w] cold key k's; hotRefused[w] its refusals.
	hotIn, hotRefused []int64
	coldIn            [][]int64
	// stranded[w] is the units batches held unspent at window w's end.
	stranded []uint64
	// admits are the instants of the hot key's admissions (buckets).
	admits         []time.Duration
	early, refused int
	calls          uint64
	hits           []portero.Hit
}

// run decides evs at n instances in mode and measures it.
func run(ctx context.Context, cfg Config, n int, mode string, evs []event) (Row, error) {
	hotL, coldL := limits(cfg, n)
	f := &fleet{cfg: cfg, mode: mode,
		hot:   portero.Rule{Name: "hot", Algorithm: cfg.Algorithm, Limit: portero.Limit{Count: hotL, Window: cfg.Window}},
		cold:  portero.Rule{Name: "cold", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: coldL, Window: cfg.Window}},
		hotIn: make([]int64, cfg.Windows), hotRefused: make([]int64, cfg.Windows), coldIn: make([][]int64, cfg.ColdKeys),
		stranded: make([]uint64, cfg.Windows), hits: make([]portero.Hit, 1)}
	for k := range f.coldIn {
		f.coldIn[k] = make([]int64, cfg.Windows)
	}
	var err error
	if f.sh, err = newShared(); err != nil {
		return Row{}, err
	}
	defer f.sh.Close(ctx)
	if mode == "leased" {
		f.hot.Budget, f.cold.Budget = cfg.Budget, cfg.Budget
		if f.insts, err = newInstances(f.sh, n); err != nil {
			return Row{}, err
		}
	}
	next := 0 // the window whose end the sweep waits for
	for _, e := range evs {
		for w := int(e.at / cfg.Window); next < w; next++ {
			if err := f.sweep(ctx, next); err != nil {
				return Row{}, err
			}
		}
		if err := f.decide(ctx, e); err != nil {
			return Row{}, err
		}
	}
	for ; next < cfg.Windows; next++ {
		if err := f.sweep(ctx, next); err != nil {
			return Row{}, err
		}
	}
	for _, s := range f.insts {
		f.calls += s.Stats().Calls
	}
	row := Row{Mode: mode, Instances: n, Limit: hotL, Requests: len(evs), EarlyRefusals: f.early, Refused: f.refused, StoreCalls: f.calls,
		Seconds: (cfg.Window * time.Duration(cfg.Windows)).Seconds(), WorstWindow: maxOf(f.hotIn)}
	row.Broken = f.bounds()
	return row, nil
}

// decide decides one request where its mode does and counts it.
func (f *fleet) decide(ctx context.Context, e event) error {
	rule, key, in := f.hot, "hot", &f.hotIn
	if e.key >= 0 {
		rule, key, in = f.cold, "c"+strconv.Itoa(int(e.key)), &f.coldIn[e.key]
	}
	w := int(e.at / f.cfg.Window)
	var st portero.Store = f.sh
	switch f.mode {
	case "exact":
		f.calls++
	case "leased":
		st = f.insts[e.inst]
	case "local":
		key = strconv.Itoa(int(e.inst)) + "/" + key // each instance alone
	}
	f.hits[0] = portero.Hit{Rule: rule, Key: key, Cost: 1}
	d, err := st.AllowAll(ctx, base.Add(e.at), f.hits)
	if err != nil {
		return fmt.Errorf("fleetsim: %s at %v: %w", f.mode, e.at, err)
	}
	if d[0].Allowed && e.key < 0 && bucket(rule.Algorithm) {
		f.admits = append(f.admits, e.at)
	}
	if !d[0].Allowed {
		f.refused++
	}
	switch {
	case d[0].Allowed:
		(*in)[w]++
	case bucket(rule.Algorithm) && e.key < 0: // early refusals: Run, against exact
	case (*in)[w] < rule.Limit.Count:
		f.early++ // an exact count would have admitted it
		fallthrough
	default:
		if e.key < 0 {
			f.hotRefused[w]++
		}
	}
	return nil
}

// sweep ends window w at every instance: what their batches held unspent
// is counted as stranded in w (leased mode; nothing to do otherwise).
func (f *fleet) sweep(ctx context.Context, w int) error {
	at := base.Add(f.cfg.Window * time.Duration(w+1))
	var before, after uint64
	for _, s := range f.insts {
		before += s.Stats().Expired
		if err := s.Sweep(ctx, at); err != nil {
			return err
		}
		after += s.Stats().Expired
	}
	f.stranded[w] = after - before
	return nil
}

// bounds checks what docs/distributed.md states for the mode: exact and
// leased never admit more than a key's limit in a window; exact never
// refuses early; leased refuses early by at most what its batches held
// unspent (a contended window admits its limit less what was stranded).
// Local mode, each instance alone, is bound by nothing but N × L.
func (f *fleet) bounds() []string {
	if f.mode == "local" {
		return nil
	}
	var out []string
	if bucket(f.hot.Algorithm) {
		out = f.bucketBounds()
	}
	for w, n := range f.hotIn {
		if bucket(f.hot.Algorithm) {
			break // a bucket's bound is not per window
		}
		if n > f.hot.Limit.Count {
			out = append(out, fmt.Sprintf("window %d: the hot key admitted %d, limit %d", w, n, f.hot.Limit.Count))
		}
		if f.mode == "leased" && f.hotRefused[w] > 0 && n+int64(f.stranded[w]) < f.hot.Limit.Count {
			out = append(out, fmt.Sprintf("window %d: the hot key admitted %d and %d units were stranded: refused early beyond the bound (limit %d)", w, n, f.stranded[w], f.hot.Limit.Count))
		}
	}
	for k, ws := range f.coldIn {
		if n := maxOf(ws); n > f.cold.Limit.Count {
			out = append(out, fmt.Sprintf("cold key %d admitted %d in a window, limit %d", k, n, f.cold.Limit.Count))
		}
	}
	if f.mode == "exact" && f.early > 0 {
		out = append(out, fmt.Sprintf("%d early refusals: the exact count refused what it had left", f.early))
	}
	return out
}

func maxOf(xs []int64) int64 {
	var m int64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// bucketBounds checks a bucket's admissions: in every interval of length
// τ at most B + r·τ in exact mode (one more for the instant the interval
// starts at) and B + r·(τ + T) leased, for τ from a tenth of a window to
// the whole run.
func (f *fleet) bucketBounds() []string {
	l := f.hot.Limit
	rate := float64(l.Count) / l.Window.Seconds()
	life := time.Duration(0)
	if f.mode == "leased" {
		life = f.hot.BudgetLifetime()
	}
	var out []string
	for _, tau := range []time.Duration{l.Window / 10, l.Window, f.cfg.Window * time.Duration(f.cfg.Windows)} {
		bound := l.Capacity() + int64(math.Ceil(rate*(tau+life).Seconds())) + 1
		if got := maxIn(f.admits, tau); got > bound {
			out = append(out, fmt.Sprintf("τ = %v: the hot key admitted %d, bound B + r(τ+T) = %d", tau, got, bound))
		}
	}
	return out
}

// maxIn is the most instants of ts (sorted) in any interval [t, t+τ).
func maxIn(ts []time.Duration, tau time.Duration) int64 {
	best, j := 0, 0
	for i := range ts {
		for ts[i]-ts[j] >= tau {
			j++
		}
		best = max(best, i-j+1)
	}
	return int64(best)
}
