package overloadsim

import (
	"fmt"
	"slices"
	"time"

	"github.com/portero-rl/portero/internal/sim"
	"github.com/portero-rl/portero/overload"
)

// The overload experiment (what goodput is left when nobody sheds load): a
// service that completes 100 requests per second receives 150
// per second for 120 s, and every client gives up after 2 s. The service
// runs 10 requests at once, each for 100 ms.
const (
	OverloadOffered  = 150.0 // requests per second
	OverloadWorkers  = 10
	OverloadRun      = 100 * time.Millisecond
	OverloadDuration = 120 * time.Second
	OverloadPatience = 2 * time.Second
	// OverloadQueue is the bounded queue's size: 2 s of work at capacity.
	OverloadQueue = 200
	// OverloadWindow is the measured stretch: the last minute, when every
	// mode has reached its steady state.
	OverloadWindow = 60 * time.Second
)

// OverloadCapacity is the service's rate: workers / run time.
var OverloadCapacity = float64(OverloadWorkers) / OverloadRun.Seconds()

// OverloadModes are the experiment's three ways of queueing:
//
//   - unbounded-fifo: a first-come first-served queue that holds everything
//     and knows no deadline, so the service goes on answering requests
//     whose clients have left;
//   - bounded-deadline: a FIFO queue of OverloadQueue places (wine),
//     requests that carry their client's deadline, dropped the moment they
//     could no longer be answered in time, and refused on arrival when
//     that moment would come before their turn;
//   - lifo: the same bounded queue with deadlines, milk order (newest
//     first; a full queue drops its oldest).
var OverloadModes = []string{"unbounded-fifo", "bounded-deadline", "lifo"}

// OverloadRow is one mode's figures over the measured window.
type OverloadRow struct {
	Mode              string
	Offered, Capacity float64 // requests per second
	// Throughput counts answers finished in the window, per second;
	// Goodput only those finished within the client's patience.
	Throughput, Goodput float64
	// GoodputRatio is Goodput / Capacity.
	GoodputRatio float64
	// P99 is the 99th percentile (nearest rank) of the latency of the
	// answers finished in the window, from arrival to answer.
	P99 time.Duration
}

// OverloadResult is the experiment's outcome.
type OverloadResult struct {
	Rows []OverloadRow
	// Seconds are the second marks 0, 1, … of the run; Goodput[m][s] and
	// Throughput[m][s] are mode m's answers (in time, and all) finished in
	// second s.
	Seconds             []float64
	Goodput, Throughput [][]float64
}

// OverloadGate returns the Gate of mode, one of OverloadModes.
func OverloadGate(mode string) (*overload.Gate, error) {
	cfg := overload.Config{MaxInFlight: OverloadWorkers}
	switch mode {
	case "unbounded-fifo":
		// Room for every request of the run: unbounded in effect.
		cfg.QueueSize = int(OverloadOffered * OverloadDuration.Seconds())
	case "bounded-deadline":
		cfg.QueueSize = OverloadQueue
	case "lifo":
		cfg.QueueSize, cfg.Order = OverloadQueue, overload.LIFO
	default:
		return nil, fmt.Errorf("overloadsim: unknown mode %q", mode)
	}
	return overload.New(cfg)
}

// RunOverload runs every mode of OverloadModes.
func RunOverload() (*OverloadResult, error) {
	res := &OverloadResult{}
	secs := int(OverloadDuration / time.Second)
	for s := range secs {
		res.Seconds = append(res.Seconds, float64(s))
	}
	from := OverloadDuration - OverloadWindow
	for _, mode := range OverloadModes {
		g, err := OverloadGate(mode)
		if err != nil {
			return nil, err
		}
		n := int(OverloadOffered * OverloadDuration.Seconds())
		jobs := make([]*Job, n)
		for k, at := range every(OverloadOffered, n, 0) {
			j := &Job{At: at}
			if mode != "unbounded-fifo" { // the service learns the client's deadline
				j.Req.Deadline = sim.Epoch.Add(at + OverloadPatience)
			}
			jobs[k] = j
		}
		serve(g, jobs, OverloadRun, OverloadDuration)
		good, all := make([]float64, secs), make([]float64, secs)
		var lat []time.Duration
		var inWindow, inTime int
		for _, j := range jobs {
			if !j.Done {
				continue
			}
			s := int(j.Finished / time.Second)
			all[s]++
			ok := j.Latency() <= OverloadPatience
			if ok {
				good[s]++
			}
			if j.Finished >= from {
				inWindow++
				if ok {
					inTime++
				}
				lat = append(lat, j.Latency())
			}
		}
		w := OverloadWindow.Seconds()
		row := OverloadRow{
			Mode: mode, Offered: OverloadOffered, Capacity: OverloadCapacity,
			Throughput: float64(inWindow) / w, Goodput: float64(inTime) / w,
			P99: percentile(lat, 0.99),
		}
		row.GoodputRatio = row.Goodput / row.Capacity
		res.Rows = append(res.Rows, row)
		res.Goodput = append(res.Goodput, good)
		res.Throughput = append(res.Throughput, all)
	}
	return res, nil
}

// percentile returns the p-quantile of ds by nearest rank; zero for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(float64(len(s))*p+0.999999999) - 1 // ⌈p·n⌉ − 1
	return s[max(0, min(k, len(s)-1))]
}

// OverloadHeader is the CSV header of the overload experiment.
var OverloadHeader = []string{"mode", "offered_per_s", "capacity_per_s", "throughput_per_s", "goodput_per_s", "goodput_ratio", "p99_latency_s"}

// Table returns the experiment's figures, one row per mode.
func (r *OverloadResult) Table() sim.Table {
	t := sim.Table{Header: OverloadHeader}
	for _, o := range r.Rows {
		t.Rows = append(t.Rows, []string{o.Mode, sim.Number(o.Offered), sim.Number(o.Capacity), sim.Fixed(o.Throughput, 2), sim.Fixed(o.Goodput, 2), sim.Fixed(o.GoodputRatio, 3), sim.FormatSeconds(o.P99.Round(time.Millisecond))})
	}
	return t
}
