package overloadsim

import (
	"context"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/sim"
	"github.com/portero-rl/portero/overload"
)

// Little's law: in-flight work L = arrival rate λ × time in the system W. A
// concurrency limit C with service time S admits at most C/S per second —
// 30 / 0.25 s = 120 — and admits less as the service slows down; a rate
// limit of 120 per second goes on admitting 120 while the work in flight
// grows with S. Clients offer 200 per second (more than either limit) for
// 70 s; the first 10 s are warm-up (the token bucket's initial burst) and
// the figures are measured over the last 60.
const (
	LittleConcurrency = 30
	LittleRate        = 120 // per second
	LittleOffered     = 200.0
	LittleDuration    = 70 * time.Second
	LittleWarmUp      = 10 * time.Second
)

// LittleServiceTimes are the service times tried, 0.25 s to 0.5 s. Each
// divides the 60 s window into whole cycles of the concurrency limit's
// slots (and is a whole number of the 5 ms between arrivals), so that its
// figures are exactly C/S, with no partial cycle at the window's edges.
var LittleServiceTimes = []time.Duration{
	250 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond,
}

// LittleRule is the rate limit: a token bucket of 120 per second.
var LittleRule = portero.Rule{Name: "little", Algorithm: portero.TokenBucket, Limit: portero.Limit{Count: LittleRate, Window: time.Second}}

// LittleRow is one limiter at one service time.
type LittleRow struct {
	Limiter     string // "concurrency" or "rate"
	ServiceTime time.Duration
	// Admitted is the requests admitted per second; InFlight the time
	// average of the requests running, both over the measured window.
	Admitted, InFlight float64
}

// LittleResult is the experiment's outcome: the concurrency limit's rows,
// then the rate limit's, each by service time.
type LittleResult struct {
	Rows []LittleRow
}

// RunLittle runs both limiters at every service time of
// LittleServiceTimes: the concurrency limit as an overload.Gate without a
// queue, the rate limit through a fresh store from open for each run.
func RunLittle(ctx context.Context, open func() (portero.Store, error)) (*LittleResult, error) {
	res := &LittleResult{}
	n := int(LittleOffered * LittleDuration.Seconds())
	arrivals := every(LittleOffered, n, 0)
	for _, limiter := range []string{"concurrency", "rate"} {
		for _, s := range LittleServiceTimes {
			var starts []time.Duration
			switch limiter {
			case "concurrency":
				g, err := overload.New(overload.Config{MaxInFlight: LittleConcurrency})
				if err != nil {
					return nil, err
				}
				jobs := make([]*Job, n)
				for i, at := range arrivals {
					jobs[i] = &Job{At: at}
				}
				serve(g, jobs, s, LittleDuration)
				for _, j := range jobs {
					if j.Ran {
						starts = append(starts, j.Started)
					}
				}
			case "rate":
				var err error
				if starts, err = rateAdmissions(ctx, open, arrivals); err != nil {
					return nil, err
				}
			}
			res.Rows = append(res.Rows, littleRow(limiter, s, starts))
		}
	}
	return res, nil
}

// rateAdmissions returns the arrivals LittleRule admits.
func rateAdmissions(ctx context.Context, open func() (portero.Store, error), arrivals []time.Duration) ([]time.Duration, error) {
	store, err := open()
	if err != nil {
		return nil, err
	}
	defer store.Close(ctx)
	hit := []portero.Hit{{Rule: LittleRule, Key: "clients", Cost: 1}}
	var out []time.Duration
	for _, at := range arrivals {
		ds, err := store.AllowAll(ctx, sim.Epoch.Add(at), hit)
		if err != nil {
			return nil, fmt.Errorf("rate limit at %s: %w", sim.FormatSeconds(at), err)
		}
		if ds[0].Allowed {
			out = append(out, at)
		}
	}
	return out, nil
}

// littleRow measures requests that started at starts and each ran s over
// the window [LittleWarmUp, LittleDuration).
func littleRow(limiter string, s time.Duration, starts []time.Duration) LittleRow {
	from, to := LittleWarmUp, LittleDuration
	admitted := 0
	var busy time.Duration // the sum of every request's running time inside the window
	for _, st := range starts {
		if st >= from && st < to {
			admitted++
		}
		if lo, hi := max(st, from), min(st+s, to); hi > lo {
			busy += hi - lo
		}
	}
	w := (to - from).Seconds()
	return LittleRow{Limiter: limiter, ServiceTime: s, Admitted: float64(admitted) / w, InFlight: busy.Seconds() / w}
}

// LittleHeader is the CSV header of the Little's law experiment.
var LittleHeader = []string{"limiter", "service_time_s", "admitted_per_s", "in_flight"}

// Table returns the experiment's figures, one row per limiter and service
// time.
func (r *LittleResult) Table() sim.Table {
	t := sim.Table{Header: LittleHeader}
	for _, o := range r.Rows {
		t.Rows = append(t.Rows, []string{o.Limiter, sim.FormatSeconds(o.ServiceTime), sim.Fixed(o.Admitted, 2), sim.Fixed(o.InFlight, 2)})
	}
	return t
}
