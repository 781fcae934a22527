package portero

import "fmt"

// Algorithm names a way of counting. The names are those used in
// configuration files and on the command line.
type Algorithm string

// The algorithms. See docs/algorithms.md for each one's state,
// worst case and when to pick it.
const (
	// FixedWindow counts in clock-aligned windows [kW, (k+1)W).
	FixedWindow Algorithm = "fixed-window"
	// FixedWindowAnchored starts a window of length W at the first request
	// of an absent or expired key (the INCR + EXPIRE form).
	FixedWindowAnchored Algorithm = "fixed-window-anchored"
	// SlidingLog keeps the time of every admitted request: at most L in any
	// window (t−W, t].
	SlidingLog Algorithm = "sliding-log"
	// SlidingCounter weighs the previous fixed window by the part of it still
	// inside the sliding window.
	SlidingCounter Algorithm = "sliding-counter"
	// TokenBucket refills Rate tokens per second up to Burst.
	TokenBucket Algorithm = "token-bucket"
	// LeakyMeter is the leaky bucket as a meter: a level that drains at Rate;
	// it admits exactly what TokenBucket admits.
	LeakyMeter Algorithm = "leaky-meter"
	// GCRA is the generic cell rate algorithm: the token bucket kept as one
	// timestamp.
	GCRA Algorithm = "gcra"
	// LeakyQueue is the leaky bucket as a queue (a shaper): requests wait in
	// a FIFO of Burst places drained one per 1/Rate; a full queue drops.
	LeakyQueue Algorithm = "leaky-queue"
)

// Algorithms lists every algorithm in a stable order.
var Algorithms = []Algorithm{FixedWindow, FixedWindowAnchored, SlidingLog, SlidingCounter, TokenBucket, LeakyMeter, GCRA, LeakyQueue}

// ParseAlgorithm returns the algorithm with the given name, or an error
// wrapping ErrUnknownAlgorithm that lists the known names.
func ParseAlgorithm(name string) (Algorithm, error) {
	for _, a := range Algorithms {
		if string(a) == name {
			return a, nil
		}
	}
	return "", fmt.Errorf("%w %q: want one of %v", ErrUnknownAlgorithm, name, Algorithms)
}

// String returns the algorithm's name.
func (a Algorithm) String() string { return string(a) }
