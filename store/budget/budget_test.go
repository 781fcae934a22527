package budget_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/budget"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
	"github.com/portero-rl/portero/store/storetest"
)

var ctx = context.Background()

// shared returns a memory store for instances to share, on no clock of
// its own.
func shared(t testing.TB) *memstore.Store {
	t.Helper()
	m, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(ctx) })
	return m
}

// backends runs a fleet test over a shared memory store and over a real
// redis-server (caller's clock: the instances' virtual one), a fresh
// prefix for each store asked.
func backends(t *testing.T, run func(t *testing.T, open func(testing.TB) portero.Store)) {
	t.Run("memory", func(t *testing.T) { run(t, func(t testing.TB) portero.Store { return shared(t) }) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		n := 0
		run(t, func(t testing.TB) portero.Store {
			n++
			s, err := redisstore.New(redisstore.Config{URL: srv.URL(), Prefix: fmt.Sprintf("b%d:", n), Clock: redisstore.CallerClock, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(ctx) })
			return s
		})
	})
}

// instance returns a budget store over sh that does not close it, with
// no sweeper (the tests sweep on their own clock).
func instance(t testing.TB, sh portero.Store) *budget.Store {
	t.Helper()
	s, err := budget.New(noClose{sh}, budget.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// noClose keeps one shared store open across the instances' Close.
type noClose struct{ portero.Store }

func (n noClose) Close(context.Context) error { return nil }
func (n noClose) Take(ctx context.Context, now time.Time, r portero.Rule, key string, need, want int64) (int64, portero.Decision, error) {
	return n.Store.(portero.Taker).Take(ctx, now, r, key, need, want)
}
func (n noClose) Adjust(ctx context.Context, now time.Time, adj []portero.Adjustment) error {
	return n.Store.(portero.Adjuster).Adjust(ctx, now, adj)
}

// TestConformanceWithoutBudgets: rules without a Budget pass through
// unchanged: the whole conformance suite, against Reference.
func TestConformanceWithoutBudgets(t *testing.T) {
	storetest.Run(t, func(t *testing.T) portero.Store {
		m, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := budget.New(m, budget.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(ctx) })
		return s
	})
}

// base is a whole number of days after the epoch (a UTC midnight).
var base = time.Unix(1_700_006_400, 0)

// event is one hit of a fleet trace: at At after base, at instance Inst,
// of Cost, and whether it was admitted.
type event struct {
	At      time.Duration
	Inst    int
	Cost    int64
	Allowed bool
}

// trace is what fleet decided: the hits, and the units found stranded
// (expired unspent) by the sweep at each multiple of the sweep interval.
type trace struct {
	events   []event
	stranded map[time.Duration]uint64
	insts    []*budget.Store
}

// fleet drives n instances over one shared store on a virtual clock from
// start to start+span: about rate(at) hits a second, in bursts of up to
// burst hits at one instant at random instances (half of them, taking
// turns every turn, when turn is positive), of costs 1 to maxCost; every
// instance sweeps at each multiple of sweep (none when 0).
func fleet(t *testing.T, sh portero.Store, rule portero.Rule, n int, seed uint64, rate func(time.Duration) int, burst int, start, span, sweep, turn time.Duration, maxCost int64) trace {
	t.Helper()
	tr := trace{stranded: map[time.Duration]uint64{}, insts: make([]*budget.Store, n)}
	for i := range tr.insts {
		tr.insts[i] = instance(t, sh)
	}
	expired := func() (n uint64) {
		for _, s := range tr.insts {
			n += s.Stats().Expired
		}
		return n
	}
	r := rand.New(rand.NewPCG(seed, 1))
	at, next := start, time.Duration(-1)
	if sweep > 0 {
		next = (start/sweep + 1) * sweep
	}
	for at < start+span {
		k := 1 + r.IntN(burst)
		at += time.Duration(r.Int64N(int64(2 * time.Second * time.Duration(k) / time.Duration(rate(at)))))
		for next >= 0 && next <= at {
			before := expired()
			for _, s := range tr.insts {
				if err := s.Sweep(ctx, base.Add(next)); err != nil {
					t.Fatal(err)
				}
			}
			tr.stranded[next] = expired() - before
			next += sweep
		}
		for range k {
			e := event{At: at, Inst: r.IntN(n), Cost: 1 + r.Int64N(maxCost)}
			if turn > 0 {
				e.Inst = e.Inst/2*2 + int(at/turn%2)
			}
			d, err := tr.insts[e.Inst].AllowAll(ctx, base.Add(at), []portero.Hit{{Rule: rule, Key: "global", Cost: e.Cost}})
			if err != nil {
				t.Fatalf("at %v: %v", at, err)
			}
			e.Allowed = d[0].Allowed
			tr.events = append(tr.events, e)
		}
	}
	return tr
}

// admittedIn sums the units admitted in [from, to).
func admittedIn(evs []event, from, to time.Duration) int64 {
	var n int64
	for _, e := range evs {
		if e.Allowed && e.At >= from && e.At < to {
			n += e.Cost
		}
	}
	return n
}

// TestWindowsNeverOver: four instances leasing one clock-aligned window,
// calendar quota or anchored window admit at most L in each window,
// exactly, under bursts far above the limit. And they refuse early by at
// most what was stranded: every instance wanting more than it gets, a
// clock-aligned window (or quota) admits at least L less the units its
// batches held unspent at its end, less one hit's largest cost (the
// shared state then has fewer left than a hit needs).
func TestWindowsNeverOver(t *testing.T) { backends(t, windowsNeverOver) }

func windowsNeverOver(t *testing.T, open func(testing.TB) portero.Store) {
	for _, c := range []struct {
		name        string
		rule        portero.Rule
		rate        int
		start, span time.Duration
	}{
		{"fixed-window", portero.Rule{Name: "fw", Algorithm: portero.FixedWindow, Limit: portero.PerSecond(500)}, 1500, 0, 6 * time.Second},
		{"anchored", portero.Rule{Name: "an", Algorithm: portero.FixedWindowAnchored, Limit: portero.PerSecond(500)}, 1500, 0, 6 * time.Second},
		// Two hours across a UTC midnight at 10 hits a second.
		{"calendar", portero.Rule{Name: "q", Algorithm: portero.FixedWindow, Limit: portero.PerDay(5000)}, 10, 23 * time.Hour, 2 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.rule.Budget = 20 * time.Millisecond
			if c.rule.Limit.IsCalendar() {
				c.rule.Budget = time.Second
			}
			window := c.rule.Limit.Window
			if c.rule.Limit.IsCalendar() {
				window = 24 * time.Hour
			}
			sweep := window
			if c.rule.Algorithm == portero.FixedWindowAnchored {
				sweep = 0
			}
			// Windows of demand below the limit, at whose end instances
			// hold units, alternate with windows of three times the
			// limit (costs average 2), which spend every unit left.
			heavy := func(at time.Duration) bool { return at/window%2 == 1 }
			rate := func(at time.Duration) int {
				if heavy(at) {
					return c.rate
				}
				return c.rate / 8
			}
			tr := fleet(t, open(t), c.rule, 16, 7, rate, 40, c.start, c.span, sweep, 0, 3)
			var windows [][2]time.Duration
			if c.rule.Algorithm == portero.FixedWindowAnchored {
				for _, e := range tr.events {
					if e.Allowed && (len(windows) == 0 || e.At >= windows[len(windows)-1][1]) {
						windows = append(windows, [2]time.Duration{e.At, e.At + window})
					}
				}
			} else {
				end := c.start + c.span
				for w := c.start / window * window; w < end; w += window {
					windows = append(windows, [2]time.Duration{max(w, c.start), min(w+window, end)})
				}
			}
			if len(windows) < 2 {
				t.Fatalf("%d whole windows: the trace proves nothing", len(windows))
			}
			for _, w := range windows {
				n := admittedIn(tr.events, w[0], w[1])
				if n > c.rule.Limit.Count {
					t.Errorf("window [%v, %v): %d admitted, limit %d", w[0], w[1], n, c.rule.Limit.Count)
				}
				if s, ok := tr.stranded[w[1]]; ok && heavy(w[0]) && n < c.rule.Limit.Count-int64(s)-2 {
					t.Errorf("window [%v, %v): %d admitted, %d stranded: refused early beyond the bound (limit %d)", w[0], w[1], n, s, c.rule.Limit.Count)
				}
				t.Logf("window [%v, %v): %d admitted of %d, %d stranded", w[0], w[1], n, c.rule.Limit.Count, tr.stranded[w[1]])
			}
		})
	}
}

// TestBucketsBound: sixteen instances leasing one token bucket, GCRA or
// leaky meter (burst B = 50, r = 100/s, Budget 20 ms, so T = 80 ms) admit
// in every interval of length τ at most B + r·(τ + T), under bursts that
// come and go around the rate; and over the run at most B + r·(D + T),
// while keeping at least 90% of r·D when demand stays above r.
func TestBucketsBound(t *testing.T) { backends(t, bucketsBound) }

func bucketsBound(t *testing.T, open func(testing.TB) portero.Store) {
	for _, alg := range []portero.Algorithm{portero.TokenBucket, portero.GCRA, portero.LeakyMeter} {
		t.Run(string(alg), func(t *testing.T) {
			rule := portero.Rule{Name: "b", Algorithm: alg, Limit: portero.Limit{Count: 100, Window: time.Second, Burst: 50}, Budget: 20 * time.Millisecond}
			const b, r = 50, 100.0
			life := rule.BudgetLifetime()
			// Demand of 60 hits a second (120 units) for half a second,
			// then 600 (1,200 units) for half a second, and so on.
			rate := func(at time.Duration) int {
				if at/(500*time.Millisecond)%2 == 0 {
					return 60
				}
				return 600
			}
			span := 10 * time.Second
			// Half the instances take turns every 300 ms.
			tr := fleet(t, open(t), rule, 16, 11, rate, 20, 0, span, 0, 300*time.Millisecond, 3)
			evs := tr.events
			for _, tau := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second, 3 * time.Second} {
				bound := b + int64(math.Ceil(r*(tau+life).Seconds()))
				worst := int64(0)
				for i, e := range evs {
					if !e.Allowed {
						continue
					}
					// The interval [e.At, e.At+τ) starting at each admission.
					n := int64(0)
					for _, f := range evs[i:] {
						if f.At >= e.At+tau {
							break
						}
						if f.Allowed {
							n += f.Cost
						}
					}
					worst = max(worst, n)
				}
				if worst > bound {
					t.Errorf("τ = %v: %d admitted, bound B + r(τ+T) = %d", tau, worst, bound)
				}
				t.Logf("τ = %v: at most %d admitted (bound %d)", tau, worst, bound)
			}
			total := admittedIn(evs, 0, span)
			if hi := b + int64(r*(span+life).Seconds()); total > hi || total < int64(0.9*r*span.Seconds()) {
				t.Errorf("%d admitted over %v: want at most B + r(D + T) = %d and at least 90%% of r·D", total, span, hi)
			}
			t.Logf("%d admitted over %v", total, span)
		})
	}
}

// TestBucketBatchLifetime: units a bucket's batch left unspent are never
// spent after its lifetime T, when the bucket has refilled meanwhile:
// eight instances each take batches in a burst and keep what they did
// not spend, the bucket refills in a pause longer than T, and a burst at
// every instance then gets at most B + r·(τ + T) — without the lifetime,
// the batches kept would come on top of the refilled burst.
func TestBucketBatchLifetime(t *testing.T) { backends(t, bucketBatchLifetime) }

func bucketBatchLifetime(t *testing.T, open func(testing.TB) portero.Store) {
	for _, alg := range []portero.Algorithm{portero.TokenBucket, portero.GCRA, portero.LeakyMeter} {
		t.Run(string(alg), func(t *testing.T) {
			rule := portero.Rule{Name: "b", Algorithm: alg, Limit: portero.Limit{Count: 1000, Window: time.Second, Burst: 800}, Budget: 20 * time.Millisecond}
			sh := open(t)
			insts := make([]*budget.Store, 8)
			burst := func(s *budget.Store, at time.Time, n int) (admitted int64) {
				for range n {
					d, err := s.AllowAll(ctx, at, []portero.Hit{{Rule: rule, Key: "global", Cost: 1}})
					if err != nil {
						t.Fatal(err)
					}
					if d[0].Allowed {
						admitted++
					}
				}
				return admitted
			}
			for i := range insts {
				insts[i] = instance(t, sh)
				burst(insts[i], base, 33) // takes of 1, 2, 4, … 32: 31 units kept
			}
			later := base.Add(time.Second) // the bucket (800 at 1,000/s) is full again
			var got int64
			for _, s := range insts {
				got += burst(s, later, 400)
			}
			bound := int64(800 + math.Ceil(1000*(time.Nanosecond+rule.BudgetLifetime()).Seconds()))
			if got > bound {
				t.Errorf("after the pause, %d admitted at one instant: over B + r(τ+T) = %d", got, bound)
			}
			if got < 700 {
				t.Errorf("after the pause, %d admitted at one instant: the refilled burst is 800", got)
			}
		})
	}
}

// TestRemainingHonest: the Remaining a leased hit reports (RateLimit's r)
// is never more than the shared state held when this instance last read
// it (its last take): four instances spending one window's limit in
// turns, each decision checked against a look at the shared state taken
// just before each take.
func TestRemainingHonest(t *testing.T) { backends(t, remainingHonest) }

func remainingHonest(t *testing.T, open func(testing.TB) portero.Store) {
	for _, alg := range []portero.Algorithm{portero.FixedWindow, portero.FixedWindowAnchored} {
		t.Run(string(alg), func(t *testing.T) {
			sh := open(t)
			rule := portero.Rule{Name: "h", Algorithm: alg, Limit: portero.PerMinute(600), Budget: 20 * time.Millisecond}
			plain := rule
			plain.Budget = 0
			insts := make([]*budget.Store, 4)
			known := make([]int64, len(insts)) // the shared state before each one's last take
			for i := range insts {
				insts[i] = instance(t, sh)
			}
			r := rand.New(rand.NewPCG(3, 4))
			at, admitted, refused := base, 0, 0
			for step := 0; step < 3000; step++ {
				at = at.Add(time.Duration(r.Int64N(int64(20 * time.Millisecond))))
				i := r.IntN(len(insts))
				look, err := sh.Peek(ctx, plain, "g", at, 1)
				if err != nil {
					t.Fatal(err)
				}
				before := insts[i].Stats()
				d, err := insts[i].AllowAll(ctx, at, []portero.Hit{{Rule: rule, Key: "g", Cost: 1 + r.Int64N(3)}})
				if err != nil {
					t.Fatal(err)
				}
				if after := insts[i].Stats(); after.Calls != before.Calls {
					known[i] = look.Remaining
				}
				if d[0].Remaining > known[i] {
					t.Fatalf("step %d, instance %d: Remaining %d, but the shared state held %d at its last take", step, i, d[0].Remaining, known[i])
				}
				if d[0].Allowed {
					admitted++
				} else {
					refused++
				}
			}
			if admitted < 200 || refused == 0 {
				t.Fatalf("%d admitted, %d refused: the trace did not spend the window", admitted, refused)
			}
		})
	}
}
