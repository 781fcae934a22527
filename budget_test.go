package portero_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
)

// TestRuleBudget: a budget is refused on the algorithms that cannot lease,
// naming those that can, and outside 1ms..MaxBudget.
func TestRuleBudget(t *testing.T) {
	for _, alg := range portero.Algorithms {
		r := portero.Rule{Name: "r", Algorithm: alg, Limit: portero.PerSecond(10), Budget: 50 * time.Millisecond}
		err := r.Validate()
		if portero.Leasable(alg) {
			if err != nil {
				t.Errorf("%s with a budget: %v, want valid", alg, err)
			}
			continue
		}
		if !errors.Is(err, portero.ErrInvalidLimit) || !strings.Contains(err.Error(), "only fixed-window") || !strings.Contains(err.Error(), string(alg)) {
			t.Errorf("%s with a budget: %v, want ErrInvalidLimit naming it and the algorithms that lease", alg, err)
		}
	}
	for _, b := range []time.Duration{-time.Millisecond, time.Microsecond, portero.MaxBudget + 1} {
		r := portero.Rule{Name: "r", Algorithm: portero.GCRA, Limit: portero.PerSecond(10), Budget: b}
		if err := r.Validate(); !errors.Is(err, portero.ErrInvalidLimit) {
			t.Errorf("budget %v: %v, want ErrInvalidLimit", b, err)
		}
	}
	cal := portero.Rule{Name: "q", Algorithm: portero.FixedWindow, Limit: portero.PerDay(100), Budget: time.Second}
	if err := cal.Validate(); err != nil {
		t.Errorf("calendar quota with a budget: %v", err)
	}
}
