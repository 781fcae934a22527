package policy

import (
	"fmt"
	"slices"
	"time"

	"github.com/portero-rl/portero"
)

// Look-back limits count as AWS WAF's rate-based rules do: at most Count
// requests over the last Window, one of WAF's windows, counted exactly by
// the sliding log. The gateway's rate_rules and the descriptors'
// look_back both build them here.
const (
	// DefaultLookBack is WAF's default evaluation window.
	DefaultLookBack = 300 * time.Second
	// MinLookBackLimit is WAF's smallest limit per window.
	MinLookBackLimit = 10
)

// LookBackWindows are WAF's evaluation windows: 60, 120, 300 and 600 s.
var LookBackWindows = []time.Duration{60 * time.Second, 120 * time.Second, 300 * time.Second, 600 * time.Second}

// ParseLookBack reads a look-back window, a Go duration that is one of
// LookBackWindows ("300s", "5m"); the empty string is DefaultLookBack.
func ParseLookBack(s string) (time.Duration, error) {
	if s == "" {
		return DefaultLookBack, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || !slices.Contains(LookBackWindows, d) {
		return 0, fmt.Errorf("%q: want 60s, 120s, 300s (the default) or 600s", s)
	}
	return d, nil
}

// LookBackLimit returns the limit of count requests over the last window
// (one of LookBackWindows), or why it is not one: a count below
// MinLookBackLimit.
func LookBackLimit(count int64, window time.Duration) (portero.Limit, error) {
	if count < MinLookBackLimit {
		return portero.Limit{}, fmt.Errorf("%d: at least %d requests per window", count, MinLookBackLimit)
	}
	if !slices.Contains(LookBackWindows, window) {
		return portero.Limit{}, fmt.Errorf("window %v: want 60s, 120s, 300s or 600s", window)
	}
	return portero.Limit{Count: count, Window: window}, nil
}
