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
// cost 1, in two episodes that each push a different algorithm to its worst
// case while leaving the others at theirs or below:
//
//  1. The boundary burst, 20 requests: 10 at 0.90, 0.91, …, 0.99 s, just
//     before the boundary of the fixed windows [0,1) and [1,2), then 10 at
//     1.00, 1.01, …, 1.09 s, just after it. The fixed window admits all 20,
//     within 0.2 s. The sliding counter admits the first 10; at 1.00 its
//     estimate is 10·(1−0) + 0 = 10, not below 10, so it refuses, but at 1.01
//     the previous window's weight has fallen to 0.99 and 10·0.99 + 0 = 9.9
//     < 10: it admits an 11th, although all 10 earlier ones are still inside
//     the last second (the previous window's requests were concentrated at
//     its end, so weighing them as if spread evenly under-counts them).
//     From 1.02 on the estimate 10·(1−e) + 1 stays ≥ 10 until 1.10, after
//     the burst. The times after the boundary must lie in (1.00, 1.10) for
//     exactly one extra admission: later ones would let the weight fall far
//     enough for a 12th.
//  2. The flood, 60 requests: one every 0.05 s (20/s, twice the rate) from
//     3.00 to 5.95 s, after 1.9 s of silence in which every algorithm has
//     forgotten the first episode and the token bucket has refilled to 10.
//     The bucket spends its 10 stored tokens and keeps admitting while the
//     refill of 0.5 token per arrival lasts: the arrivals at 3.00 … 3.90
//     (19 of them) pass, 3.95 finds half a token, and from 4.00 on it admits
//     every other arrival (10/s). So [3.00, 4.00) holds 10 + 9 = 19: its
//     full burst plus the 9 tokens that drip in within one second. The
//     windows meanwhile admit 10 per window at its start (fixed) or spread
//     one per 0.1 s (sliding counter, whose estimate only falls below 10
//     every other arrival), never more than 10 in any second; the queue
//     keeps 10 waiting and releases one per 0.1 s.
//
// The sliding log never admits more than 10 in any second; the queue never
// releases more than 10 (one per 0.1 s), and both reach 10. testdata/burst.csv
// holds the same trace as data; a test keeps the two equal.
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
