//go:build race

package gateway_test

// raceEnabled is true under the race detector, which makes sync.Pool drop
// items at random, so allocation counts are not stable.
const raceEnabled = true
