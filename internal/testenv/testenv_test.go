package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Skip and Fatal instead of stopping
// the real test.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped = true
	if len(args) > 0 {
		r.msg, _ = args[0].(string)
	}
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	r.msg = fmt.Sprintf(format, args...)
}

func TestNeedCommandFound(t *testing.T) {
	if p := NeedCommand(t, "go"); p == "" {
		t.Fatal(`NeedCommand(t, "go") = "", want its path`)
	}
}

// TestNeedCommandMissing: a missing tool fails the test, with an install
// hint, wherever it runs.
func TestNeedCommandMissing(t *testing.T) {
	for _, ci := range []string{"", "true", "false"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			t.Setenv("PATH", t.TempDir())
			r := &recorder{TB: t}
			NeedCommand(r, "redis-server")
			if !r.failed || r.skipped || !strings.Contains(r.msg, "apt-get install -y redis-server") {
				t.Errorf("NeedCommand(redis-server) without it: failed=%v skipped=%v msg=%q, want a failure with an apt-get hint", r.failed, r.skipped, r.msg)
			}
		})
	}
}
