package retrysim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/portero-rl/portero/client"
	"github.com/portero-rl/portero/internal/sim"
)

// HerdConfig configures [RunHerd]. Zero fields take the defaults in
// brackets: waves of retries at 1 s, 3 s and 7 s without jitter.
type HerdConfig struct {
	// Clients refused at the same instant, t = 0 [200].
	Clients int
	// Base and Cap of the backoff: retry n waits min(Cap, Base·2^(n−1))
	// without jitter, a uniform draw from [0, that) with full jitter
	// [1 s, 10 s: waits of 1, 2, 4 s, so returns at 1, 3, 7 s].
	Base, Cap time.Duration
	// MaxAttempts per client, the refused first one included [4].
	MaxAttempts int
	// Capacity is how many requests per second the service accepts after
	// t = 0, served in 100-ms slots of Capacity/10 [0: it keeps refusing,
	// so every client makes all its attempts].
	Capacity float64
	// Duration of the run [10 s] and width of the buckets [100 ms].
	Duration, Bucket time.Duration
	// RetryAfter is what the service answers in the Retry-After variants:
	// every refusal says come back in RetryAfter [1 s: returns at 1, 2, 3 s].
	RetryAfter time.Duration
	// RetryAfterJitter is the most the retry-after+jitter variant adds
	// after each Retry-After, a uniform draw as package client does
	// [client.DefaultRetryAfterJitter, 1 s].
	RetryAfterJitter time.Duration
	// Seed seeds the jitter.
	Seed uint64
}

func (c HerdConfig) withDefaults() (HerdConfig, error) {
	c.RetryAfter = cmp.Or(c.RetryAfter, time.Second)
	c.RetryAfterJitter = cmp.Or(c.RetryAfterJitter, client.DefaultRetryAfterJitter)
	c.Clients = cmp.Or(c.Clients, 200)
	c.Base = cmp.Or(c.Base, time.Second)
	c.Cap = cmp.Or(c.Cap, 10*time.Second)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 4)
	c.Duration = cmp.Or(c.Duration, 10*time.Second)
	c.Bucket = cmp.Or(c.Bucket, 100*time.Millisecond)
	switch {
	case c.Clients < 0 || c.Clients > 1e6, c.MaxAttempts < 0, c.Capacity < 0:
		return c, fmt.Errorf("retrysim: Clients %d, MaxAttempts %d and Capacity %v must be non-negative (Clients at most 1e6)", c.Clients, c.MaxAttempts, c.Capacity)
	case c.Base < 0, c.Cap < c.Base, c.Duration < 0, c.Bucket < 0, c.RetryAfter < 0, c.RetryAfterJitter < 0:
		return c, fmt.Errorf("retrysim: negative durations or Cap below Base: %+v", c)
	case c.Duration/c.Bucket > 1e5:
		return c, fmt.Errorf("retrysim: %v in buckets of %v is too many buckets", c.Duration, c.Bucket)
	}
	return c, nil
}

// The ways of waiting compared by [RunHerd], in the order of its variants.
const (
	// NoJitter waits min(Cap, Base·2^(n−1)) before retry n: in waves.
	NoJitter = "no-jitter"
	// FullJitter waits a uniform draw from [0, that).
	FullJitter = "full-jitter"
	// RetryAfterExact is told Retry-After on every refusal and waits
	// exactly that, as a client that honours it to the letter.
	RetryAfterExact = "retry-after"
	// RetryAfterJitter waits the Retry-After plus a uniform draw from
	// [0, RetryAfterJitter): package client's default.
	RetryAfterJitter = "retry-after+jitter"
)

// HerdVariant is one way of waiting in the herd experiment.
type HerdVariant struct {
	Name string // NoJitter, FullJitter, RetryAfterExact or RetryAfterJitter
	// Load[k] is the number of retries reaching the service in bucket k
	// (the refused first attempts at t = 0 are not counted: they are the
	// same for both variants and start the experiment).
	Load []float64
	// Peak is the largest Load; PeakAt the start of its bucket.
	Peak   float64
	PeakAt time.Duration
	// Waves lists the starts of the buckets holding at least half of the
	// clients: where the herd comes back together.
	Waves []time.Duration
	// Served counts clients whose retry was accepted (0 when Capacity is 0).
	Served int
}

// HerdResult is the outcome of [RunHerd].
type HerdResult struct {
	Config   HerdConfig    // with defaults filled in
	T        []float64     // bucket starts, seconds
	Variants []HerdVariant // NoJitter, FullJitter, RetryAfterExact, RetryAfterJitter
}

// RunHerd runs the thundering-herd experiment: Clients clients are refused
// at t = 0 and retry, four times over: with the same backoff without jitter
// and with full jitter (the service sends no Retry-After), then told
// Retry-After: RetryAfter on every refusal, waiting exactly that and waiting
// that plus up to RetryAfterJitter. The uniform draws come from Seed.
// Requests are instant; a client stops at its first accepted retry or after
// MaxAttempts attempts.
func RunHerd(cfg HerdConfig) (HerdResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return HerdResult{}, err
	}
	n := int((cfg.Duration + cfg.Bucket - 1) / cfg.Bucket)
	res := HerdResult{Config: cfg, T: make([]float64, n)}
	for k := range n {
		res.T[k] = (time.Duration(k) * cfg.Bucket).Seconds()
	}
	for _, name := range []string{NoJitter, FullJitter, RetryAfterExact, RetryAfterJitter} {
		res.Variants = append(res.Variants, runHerd(cfg, name, n))
	}
	return res, nil
}

func runHerd(cfg HerdConfig, name string, buckets int) HerdVariant {
	v := HerdVariant{Name: name, Load: make([]float64, buckets)}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x4e4d))
	var q sim.Events[attempt]
	for c := range cfg.Clients {
		q.Push(0, attempt{c, 1}) // attempt 1 at t = 0, refused
	}
	const slot = 100 * time.Millisecond
	perSlot := int(cfg.Capacity * slot.Seconds())
	slotStart, slotUsed := time.Duration(-1), 0
	for q.Len() > 0 {
		at, e := q.Pop()
		if e.n > 1 {
			if k := int(at / cfg.Bucket); k < buckets {
				v.Load[k]++
			}
			if s := at.Truncate(slot); s != slotStart {
				slotStart, slotUsed = s, 0
			}
			if slotUsed < perSlot {
				slotUsed++
				v.Served++
				continue
			}
		}
		if e.n >= cfg.MaxAttempts {
			continue
		}
		var wait time.Duration
		switch name {
		case NoJitter:
			wait = client.Backoff(e.n, cfg.Base, cfg.Cap) // retry n = e.n
		case FullJitter:
			wait = client.FullJitter(client.Backoff(e.n, cfg.Base, cfg.Cap), rng.Float64())
		case RetryAfterExact:
			wait = cfg.RetryAfter
		case RetryAfterJitter:
			wait = cfg.RetryAfter + client.FullJitter(cfg.RetryAfterJitter, rng.Float64())
		}
		q.Push(at+wait, attempt{e.req, e.n + 1})
	}
	for k, l := range v.Load {
		if l > v.Peak {
			v.Peak, v.PeakAt = l, time.Duration(k)*cfg.Bucket
		}
		if l*2 >= float64(cfg.Clients) && l > 0 {
			v.Waves = append(v.Waves, time.Duration(k)*cfg.Bucket)
		}
	}
	return v
}

// Series returns the chart's data: retries per bucket for each variant,
// against t (bucket start, seconds).
func (r HerdResult) Series() (names []string, t []float64, values [][]float64) {
	for _, v := range r.Variants {
		names = append(names, v.Name)
		values = append(values, v.Load)
	}
	return names, r.T, values
}

// Lines returns the summary as human-readable lines, including the peak
// load per bucket of each variant.
func (r HerdResult) Lines() []string {
	c := r.Config
	out := []string{fmt.Sprintf("herd: %d clients refused at t=0; retry n waits min(%v, %v·2^(n-1)), or Retry-After %v (+ up to %v of jitter); %d attempts at most; capacity %v/s",
		c.Clients, c.Cap, c.Base, c.RetryAfter, c.RetryAfterJitter, c.MaxAttempts, c.Capacity)}
	for _, v := range r.Variants {
		out = append(out, fmt.Sprintf("%-18s peak %4.0f retries per %v (at %v); waves at %v; served %d",
			v.Name, v.Peak, c.Bucket, v.PeakAt, v.Waves, v.Served))
	}
	return out
}

// Table returns the summary and one row per bucket: t_s, then the retries
// per bucket of each variant.
func (r HerdResult) Table() sim.Table {
	t := sim.Table{Summary: r.Lines(), Header: []string{"t_s"}}
	for _, v := range r.Variants {
		t.Header = append(t.Header, v.Name)
	}
	for k, ts := range r.T {
		row := []string{sim.Fixed(ts, 1)}
		for _, v := range r.Variants {
			row = append(row, sim.Number(v.Load[k]))
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// Charts draws the retries per bucket over time to path.
func (r HerdResult) Charts(path string) ([]string, error) {
	return steps(path, "Thundering herd: retries reaching the service", "retries per 100 ms", r)
}
