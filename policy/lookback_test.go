package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/policy"
)

func TestLookBack(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 300 * time.Second, "60s": time.Minute, "2m": 120 * time.Second, "300s": 5 * time.Minute, "10m": 600 * time.Second} {
		if got, err := policy.ParseLookBack(in); err != nil || got != want {
			t.Errorf("ParseLookBack(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"90s", "0s", "-60s", "1h", "300", "5 m", "x"} {
		if got, err := policy.ParseLookBack(in); err == nil || !strings.Contains(err.Error(), "want 60s, 120s, 300s (the default) or 600s") {
			t.Errorf("ParseLookBack(%q) = %v, %v; want an error naming the four windows", in, got, err)
		}
	}
	if got, err := policy.LookBackLimit(10, time.Minute); err != nil || got != (portero.Limit{Count: 10, Window: time.Minute}) {
		t.Errorf("LookBackLimit(10, 1m) = %+v, %v", got, err)
	}
	for _, tt := range []struct {
		n       int64
		w       time.Duration
		mention string
	}{{9, time.Minute, "9: at least 10 requests per window"}, {0, time.Minute, "at least 10"}, {100, 90 * time.Second, "window 1m30s"}} {
		if got, err := policy.LookBackLimit(tt.n, tt.w); err == nil || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("LookBackLimit(%d, %v) = %+v, %v; want an error mentioning %q", tt.n, tt.w, got, err, tt.mention)
		}
	}
}

func FuzzParseLookBack(f *testing.F) {
	for _, s := range []string{"", "60s", "5m", "90s", "x", "600000ms"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := policy.ParseLookBack(s)
		if err != nil {
			return
		}
		if _, err := policy.LookBackLimit(policy.MinLookBackLimit, d); err != nil {
			t.Fatalf("ParseLookBack(%q) = %v, which LookBackLimit refuses: %v", s, d, err)
		}
	})
}
