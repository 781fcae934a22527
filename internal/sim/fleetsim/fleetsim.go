// Package fleetsim simulates a fleet of instances sharing one global rule
// on a virtual clock (portero sim fleet): N instances, a hot key every
// instance asks about and cold keys asked now and then, steady and bursty
// clients, decided in three modes — exact (every decision in the shared
// store), leased (store/budget in front of it at each instance) and local
// (each instance alone, as without a shared store: N × L) — with the
// shared store a real store/memstore. It reports each mode's worst window
// against the limit, its early refusals and its store calls, and checks
// the bounds docs/distributed.md states.
package fleetsim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/budget"
	"github.com/portero-rl/portero/store/memstore"
)

// Modes are the ways a fleet decides, in the order they are reported.
var Modes = []string{"exact", "leased", "local"}

// Config is one experiment. The zero value of a field gives its default.
type Config struct {
	// Instances are the fleet sizes tried (default 10, 100, 1,000, 10,000).
	Instances []int
	// Rate is the requests a second each instance is offered (default
	// 100): 90% for the hot key, 10% for the cold keys; 60% evenly spaced
	// (steady clients), 40% in bursts of Burst requests at one instant.
	Rate float64
	// Burst is the size of a bursty client's burst (default 20).
	Burst int
	// Window is the rules' fixed window (default 100 ms), Windows how many
	// are simulated (default 5).
	Window  time.Duration
	Windows int
	// Budget is the leased rules' budget (default 50 ms).
	Budget time.Duration
	// ColdKeys is how many cold keys share the cold traffic (default 100).
	ColdKeys int
	// Seed makes the traffic (default 1).
	Seed uint64
	// Algorithm is the hot key's (default fixed-window): fixed-window or
	// a bucket (the algorithms that lease, but the anchored window, whose
	// windows the simulation does not count).
	// For a bucket (token-bucket, leaky-meter, gcra) the limit per window
	// is its rate, and its burst the same.
	Algorithm portero.Algorithm
}

func (c Config) withDefaults() Config {
	if len(c.Instances) == 0 {
		c.Instances = []int{10, 100, 1000, 10000}
	}
	c.Rate = cmp.Or(c.Rate, 100)
	c.Burst = cmp.Or(c.Burst, 20)
	c.Window = cmp.Or(c.Window, 100*time.Millisecond)
	c.Windows = cmp.Or(c.Windows, 5)
	c.Budget = cmp.Or(c.Budget, 50*time.Millisecond)
	c.ColdKeys = cmp.Or(c.ColdKeys, 100)
	c.Seed = cmp.Or(c.Seed, 1)
	c.Algorithm = cmp.Or(c.Algorithm, portero.FixedWindow)
	return c
}

// Validate reports what is wrong with c (after its defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	for _, n := range c.Instances {
		if n < 1 || n > 10000 {
			return fmt.Errorf("fleetsim: %d instances: want 1 to 10,000", n)
		}
	}
	switch {
	case c.Rate <= 0 || c.Rate > 10000:
		return fmt.Errorf("fleetsim: rate %v: want more than 0 and at most 10,000 a second per instance", c.Rate)
	case c.Burst < 1 || c.Windows < 2 || c.ColdKeys < 1 || c.Window < time.Millisecond:
		return fmt.Errorf("fleetsim: burst %d, %d windows of %v, %d cold keys: want a burst, at least 2 windows of at least 1ms, a cold key", c.Burst, c.Windows, c.Window, c.ColdKeys)
	case c.Budget < time.Millisecond || c.Budget > portero.MaxBudget:
		return fmt.Errorf("fleetsim: budget %v: want 1ms to %v", c.Budget, portero.MaxBudget)
	case c.Algorithm != portero.FixedWindow && !bucket(c.Algorithm):
		return fmt.Errorf("fleetsim: algorithm %s: the simulation counts clock-aligned windows or buckets: want fixed-window, token-bucket, leaky-meter or gcra", c.Algorithm)
	}
	return nil
}

// Row is one mode at one fleet size.
type Row struct {
	Mode      string
	Instances int
	// Limit is the hot key's limit per window: half of what the fleet
	// offers it, so that every window is contended.
	Limit    int64
	Requests int
	// WorstWindow is the most the hot key admitted in one window.
	WorstWindow int64
	// EarlyRefusals counts the refusals of requests an exact count would
	// have admitted (the window's fleet-wide count still below its limit);
	// for a bucket, the refusals beyond the exact mode's on the same
	// traffic. Refused counts every refusal.
	EarlyRefusals, Refused int
	// StoreCalls counts the calls to the shared store (0 in local mode,
	// which has none); Seconds is the virtual time simulated.
	StoreCalls uint64
	Seconds    float64
	// Broken says which stated bound the mode broke; empty when none.
	Broken []string
}

// StoreCallsPerSecond is the shared store's load.
func (r Row) StoreCallsPerSecond() float64 { return float64(r.StoreCalls) / r.Seconds }

// Result is the experiment's outcome: for each fleet size, a row per mode.
type Result struct {
	Config Config
	Rows   []Row
}

// Run runs every mode at every fleet size of cfg.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	res := &Result{Config: cfg}
	for _, n := range cfg.Instances {
		evs := traffic(cfg, n)
		var exact Row
		for _, mode := range Modes {
			row, err := run(ctx, cfg, n, mode, evs)
			if err != nil {
				return nil, err
			}
			switch {
			case mode == "exact":
				exact = row
			case bucket(cfg.Algorithm):
				row.EarlyRefusals = max(0, row.Refused-exact.Refused)
			}
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// Check returns an error naming every bound broken, nil when every mode
// kept its bounds.
func (r *Result) Check() error {
	var msgs []string
	for _, row := range r.Rows {
		for _, b := range row.Broken {
			msgs = append(msgs, fmt.Sprintf("%s, %d instances: %s", row.Mode, row.Instances, b))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("fleetsim: bounds broken:\n  %s", strings.Join(msgs, "\n  "))
}

// event is one request: at an offset from the start, at an instance, for
// the hot key (key −1) or a cold one.
type event struct {
	at   time.Duration
	inst int32
	key  int32
}

// traffic makes the requests n instances are offered, in time order.
func traffic(cfg Config, n int) []event {
	r := rand.New(rand.NewPCG(cfg.Seed, uint64(n)))
	span := cfg.Window * time.Duration(cfg.Windows)
	evs := make([]event, 0, int(float64(n)*cfg.Rate*span.Seconds()*1.1))
	key := func() int32 {
		if r.Float64() < 0.1 {
			return int32(r.IntN(cfg.ColdKeys))
		}
		return -1
	}
	steady := time.Duration(float64(time.Second) / (0.6 * cfg.Rate))
	bursts := 0.4 * cfg.Rate / float64(cfg.Burst) // a second, per instance
	for i := range n {
		for at := time.Duration(r.Int64N(int64(steady))); at < span; at += steady {
			evs = append(evs, event{at, int32(i), key()})
		}
		for at := time.Duration(r.ExpFloat64() / bursts * float64(time.Second)); at < span; at += time.Duration(r.ExpFloat64() / bursts * float64(time.Second)) {
			for range cfg.Burst {
				evs = append(evs, event{at, int32(i), key()})
			}
		}
	}
	slices.SortStableFunc(evs, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	return evs
}

// bucket reports whether alg is one of the buckets, bound by
// B + r·(τ + T) rather than by L per window.
func bucket(alg portero.Algorithm) bool {
	return alg == portero.TokenBucket || alg == portero.LeakyMeter || alg == portero.GCRA
}

// limits are the hot and cold keys' limits per window at n instances:
// half of what each is offered, at least 1.
func limits(cfg Config, n int) (hot, cold int64) {
	perWindow := float64(n) * cfg.Rate * cfg.Window.Seconds()
	hot = max(1, int64(math.Round(0.9*perWindow/2)))
	cold = max(1, int64(math.Round(0.1*perWindow/float64(cfg.ColdKeys)/2)))
	return hot, cold
}

// newShared is the fleet's shared store, on the virtual clock alone.
func newShared() (*memstore.Store, error) {
	return memstore.New(memstore.Config{SweepInterval: -1, MaxKeys: 1 << 22})
}

// newInstances puts a budget store at each of n instances over sh, swept
// on the virtual clock.
func newInstances(sh *memstore.Store, n int) ([]*budget.Store, error) {
	out := make([]*budget.Store, n)
	for i := range out {
		b, err := budget.New(sh, budget.Config{SweepInterval: -1})
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}
