package sim

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/portero-rl/portero"
)

// The burst experiment: five algorithms receive the same 80 requests with
// the same settings, and for each we find the largest number of requests it
// let through in any one-second interval: fixed-window 20, sliding-log 10,
// sliding-counter 11, token-bucket 19, leaky-queue 10.

// BurstLimit is the experiment's setting: limit 10 per window of 1 s, which
// the token bucket and the queue read as capacity 10 and rate 10/s.
var BurstLimit = portero.Limit{Count: 10, Window: time.Second}

// BurstAlgorithms are the five algorithms of the experiment, in the order
// docs/algorithms.md shows them.
var BurstAlgorithms = []portero.Algorithm{
	portero.FixedWindow, portero.SlidingLog, portero.SlidingCounter,
	portero.TokenBucket, portero.LeakyQueue,
}

// BurstKey is the one key of the burst trace.
const BurstKey = "client"

// BurstTrace returns the experiment's 80 requests, all from BurstKey with
// cost 1, in two episodes that each push one algorithm to its worst case
// while leaving the others at theirs or below:
//
//  1. the boundary burst: 10 requests at 0.90, 0.91, …, 0.99 s, just before
//     the boundary of the fixed windows [0,1) and [1,2), then 10 at 1.00, …,
//     1.09 s (the fixed window admits all 20; the sliding counter an 11th
//     at 1.01, which only times in (1.00, 1.10) give exactly);
//  2. after 1.9 s of silence, the flood: one request every 0.05 s (twice
//     the rate) from 3.00 to 5.95 s (the token bucket admits 10 + 9 in
//     [3.00, 4.00): its burst and what drips in within one second).
//
// docs/algorithms.md ("The trace") follows each algorithm through it;
// testdata/burst.csv holds the same trace as data, and a test keeps the
// two equal.
func BurstTrace() []Request {
	const ms = time.Millisecond
	tr := make([]Request, 0, 80)
	add := func(at time.Duration) { tr = append(tr, Request{At: at, Key: BurstKey, Cost: 1}) }
	for i := range 20 { // 0.90 … 1.09, one every 10 ms
		add(900*ms + time.Duration(i)*10*ms)
	}
	for i := range 60 { // 3.00 … 5.95, one every 50 ms
		add(3*time.Second + time.Duration(i)*50*ms)
	}
	return tr
}

// BurstResult is one algorithm's outcome in the burst experiment.
type BurstResult struct {
	Algorithm portero.Algorithm
	// Results are the decisions, one per request of the trace.
	Results []Result
	// Through are the instants at which requests went through: admissions,
	// or for the queue departures. A request of cost c counts c times.
	Through []time.Duration
	// Max is the largest number of Through in any interval [s, s+Window).
	Max int
}

// RunBurst replays trace through a fresh store from open for each algorithm
// in algs under limit and measures each one's largest throughput in any
// interval of length limit.Window. The stores are closed before it returns.
func RunBurst(ctx context.Context, open func() (portero.Store, error), algs []portero.Algorithm, limit portero.Limit, trace []Request) (BurstResults, error) {
	out := make(BurstResults, 0, len(algs))
	for _, alg := range algs {
		store, err := open()
		if err != nil {
			return nil, err
		}
		rule := portero.Rule{Name: "burst-" + string(alg), Algorithm: alg, Limit: limit}
		res, err := Replay(ctx, store, rule, trace)
		cerr := store.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", alg, err)
		}
		if cerr != nil {
			return nil, cerr
		}
		through := Through(res)
		out = append(out, BurstResult{Algorithm: alg, Results: res, Through: through, Max: MaxInWindow(through, limit.Window)})
	}
	return out, nil
}

// Through returns the sorted instants at which admitted requests went
// through: their arrival, or their departure when the decision had a Delay
// (a queue). A request of cost c counts c times at that instant.
func Through(results []Result) []time.Duration {
	var t []time.Duration
	for _, r := range results {
		at, ok := r.Departure()
		if !ok {
			continue
		}
		for range r.Cost {
			t = append(t, at)
		}
	}
	sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
	return t
}

// MaxInWindow returns the largest number of instants of sorted times that
// fall in one half-open interval [s, s+w), over every s. The maximum is
// reached with s at one of the instants, which is what it tries.
func MaxInWindow(times []time.Duration, w time.Duration) int {
	best, j := 0, 0
	for i := range times {
		for j < len(times) && times[j] < times[i]+w {
			j++
		}
		if n := j - i; n > best {
			best = n
		}
	}
	return best
}
