package algorithm

import (
	"errors"
	"testing"
	"time"

	"github.com/portero-rl/portero"
)

// MaxCost answers for every algorithm what its decider says, the sliding
// log included, and refuses an unknown algorithm or a bad limit.
func TestMaxCost(t *testing.T) {
	l := portero.Limit{Count: 5, Window: time.Second, Burst: 7}
	for _, alg := range portero.Algorithms {
		var want int64
		if alg == portero.SlidingLog {
			lg, err := NewSlidingLog(l)
			if err != nil {
				t.Fatal(err)
			}
			want = lg.MaxCost()
		} else {
			d, err := New(alg, l)
			if err != nil {
				t.Fatal(err)
			}
			want = d.MaxCost()
		}
		if got, err := MaxCost(alg, l); err != nil || got != want {
			t.Errorf("MaxCost(%s) = %d, %v; want %d", alg, got, err, want)
		}
	}
	if _, err := MaxCost("no-such", l); !errors.Is(err, portero.ErrUnknownAlgorithm) {
		t.Errorf("MaxCost of an unknown algorithm: %v", err)
	}
	if _, err := MaxCost(portero.SlidingLog, portero.Limit{}); !errors.Is(err, portero.ErrInvalidLimit) {
		t.Errorf("MaxCost of a zero limit: %v", err)
	}
}
