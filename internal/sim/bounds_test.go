package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/portero-rl/portero"
)

// The general bounds, checked on many seeded random traces. For a limit of
// L per window W, and for the buckets capacity B and interval I = 1/r (in
// whole ns, portero.Limit.Interval), in every half-open interval [s, s+T):
//
//   - fixed window: at most L in each window [kW, (k+1)W), so at most 2L
//     when T = W (an interval of length W meets two windows);
//   - sliding counter: also at most L per fixed window (it admits only while
//     cur < L), so at most 2L when T = W;
//   - sliding log: at most L when T = W;
//   - token bucket: at most B + ⌈T/I⌉ − 1. The bucket holds at most B·I ns of
//     credit at s and gains at most T − 1 ns more before the last instant
//     inside the interval, s+T−1ns; each unit costs I. This is the bucket's
//     B + r·T, tightened by one when T is a multiple of I (the burst
//     experiment's 19 = 10 + 10 − 1 reaches it);
//   - leaky queue (requests of cost 1): at most ⌈T/I⌉ departures, since
//     departures are at least I apart; and no request waits more than B·I.
//
// The traces mix bursts of simultaneous requests, short and long gaps, two
// keys, and costs up to 3 (cost 1 for the queue, whose departures would
// otherwise count c units at one instant).

type boundCase struct {
	limit portero.Limit
	trace []Request
}

func randomCase(rng *rand.Rand, maxCost int64) boundCase {
	l := portero.Limit{
		Count:  1 + rng.Int64N(12),
		Window: time.Duration(1+rng.Int64N(2000)) * time.Millisecond,
	}
	if rng.IntN(2) == 0 {
		l.Burst = 1 + rng.Int64N(12)
	}
	if rng.IntN(2) == 0 {
		l.Rate = float64(1+rng.IntN(400)) / 20 // 0.05 … 20 per second
	}
	n := 50 + rng.IntN(250)
	tr := make([]Request, 0, n)
	var at time.Duration
	keys := []string{"a", "b"}
	for range n {
		switch rng.IntN(4) {
		case 0: // same instant: a burst
		case 1:
			at += time.Duration(rng.Int64N(int64(l.Window)/10 + 1))
		case 2:
			at += time.Duration(rng.Int64N(int64(l.Window) + 1))
		default:
			at += time.Duration(rng.Int64N(3 * int64(l.Window)))
		}
		cost := 1 + rng.Int64N(maxCost)
		if c := l.Count; cost > c {
			cost = c
		}
		if c := l.Capacity(); cost > c {
			cost = c
		}
		tr = append(tr, Request{At: at, Key: keys[rng.IntN(len(keys))], Cost: cost})
	}
	return boundCase{limit: l, trace: tr}
}

// throughByKey replays c under alg and returns, per key, the sorted instants
// at which cost units went through.
func throughByKey(t *testing.T, alg portero.Algorithm, c boundCase) (map[string][]time.Duration, []Result) {
	t.Helper()
	store, err := openSimStore()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	res, err := Replay(context.Background(), store, portero.Rule{Name: "r", Algorithm: alg, Limit: c.limit}, c.trace)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string][]Result{}
	for _, r := range res {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	out := map[string][]time.Duration{}
	for k, rs := range byKey {
		out[k] = Through(rs)
	}
	return out, res
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func TestBoundsOnRandomTraces(t *testing.T) {
	const traces = 300
	for seed := uint64(1); seed <= traces; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		c := randomCase(rng, 3)
		l := c.limit
		L, W := int(l.Count), l.Window
		B, I := l.Capacity(), int64(l.Interval())
		name := fmt.Sprintf("seed %d (%s)", seed, l)

		for _, tc := range []struct {
			alg   portero.Algorithm
			bound int
		}{
			{portero.FixedWindow, 2 * L},
			{portero.SlidingCounter, 2 * L},
			{portero.SlidingLog, L},
		} {
			through, _ := throughByKey(t, tc.alg, c)
			for k, ts := range through {
				if got := MaxInWindow(ts, W); got > tc.bound {
					t.Errorf("%s: %s let %d through for key %s in some interval of %v, bound %d", name, tc.alg, got, k, W, tc.bound)
				}
			}
			if tc.alg != portero.SlidingLog {
				// At most L in each aligned window: a window of W starting
				// at a multiple of W holds what one fixed window admitted.
				for k, ts := range through {
					per := map[int64]int{}
					for _, at := range ts {
						per[int64(at)/int64(W)]++
					}
					for win, n := range per {
						if n > L {
							t.Errorf("%s: %s let %d through for key %s in window %d, want at most %d", name, tc.alg, n, k, win, L)
						}
					}
				}
			}
		}

		through, _ := throughByKey(t, portero.TokenBucket, c)
		for _, T := range []time.Duration{time.Duration(I), 300 * time.Millisecond, W, time.Second, 2500 * time.Millisecond, 7 * time.Second} {
			bound := int(B + ceilDiv(int64(T), I) - 1)
			for k, ts := range through {
				if got := MaxInWindow(ts, T); got > bound {
					t.Errorf("%s: token-bucket let %d through for key %s in some interval of %v, bound B + ⌈T/I⌉ − 1 = %d", name, got, k, T, bound)
				}
			}
		}

		// The queue, with cost 1.
		q := c
		q.trace = append([]Request(nil), c.trace...)
		for i := range q.trace {
			q.trace[i].Cost = 1
		}
		through, res := throughByKey(t, portero.LeakyQueue, q)
		for _, T := range []time.Duration{time.Duration(I), time.Duration(I) / 2, 300 * time.Millisecond, W, time.Second, 7 * time.Second} {
			bound := int(ceilDiv(int64(T), I))
			for k, ts := range through {
				if got := MaxInWindow(ts, T); got > bound {
					t.Errorf("%s: leaky-queue released %d for key %s in some interval of %v, bound ⌈T/I⌉ = %d", name, got, k, T, bound)
				}
			}
		}
		for _, r := range res {
			if r.Allowed && int64(r.Delay) > B*I {
				t.Errorf("%s: leaky-queue delay %v at %s, more than B·I = %v", name, r.Delay, FormatSeconds(r.At), time.Duration(B*I))
			}
		}
	}
}

// TestBoundsCatchAViolation makes sure the checks above can fail: the
// fixed window's own worst case breaks the sliding log's bound.
func TestBoundsCatchAViolation(t *testing.T) {
	res, err := RunBurst(context.Background(), openSimStore, []portero.Algorithm{portero.FixedWindow}, BurstLimit, BurstTrace())
	if err != nil {
		t.Fatal(err)
	}
	if got := MaxInWindow(res[0].Through, time.Second); got <= int(BurstLimit.Count) {
		t.Errorf("fixed-window on the burst trace: %d in some second, want more than L = %d", got, BurstLimit.Count)
	}
}
