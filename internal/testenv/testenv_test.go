package testenv

import (
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
func (r *recorder) Fatalf(format string, args ...any) { r.failed = true; r.msg = format }

func TestNeedCommandFound(t *testing.T) {
	if p := NeedCommand(t, "go"); p == "" {
		t.Fatal(`NeedCommand(t, "go") = "", want its path`)
	}
}

func TestNeedCommandMissing(t *testing.T) {
	const missing = "portero-no-such-command"
	for _, tc := range []struct {
		name, ci, require string
		wantFail          bool
	}{
		{"developer", "", "", false},
		{"ci", "true", "", true},
		{"make test", "", "1", true},
		{"ci false", "false", "0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv("PORTERO_REQUIRE_REDIS", tc.require)
			r := &recorder{TB: t}
			NeedCommand(r, missing)
			if r.failed != tc.wantFail || r.skipped == tc.wantFail {
				t.Errorf("NeedCommand(%q) with CI=%q PORTERO_REQUIRE_REDIS=%q: failed=%v skipped=%v, want failed=%v",
					missing, tc.ci, tc.require, r.failed, r.skipped, tc.wantFail)
			}
		})
	}
}

func TestNeedCommandHint(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("PORTERO_REQUIRE_REDIS", "")
	t.Setenv("PATH", t.TempDir())
	r := &recorder{TB: t}
	NeedCommand(r, "redis-server")
	if !r.skipped || r.msg == "" || !strings.Contains(r.msg, "apt-get install -y redis-server") {
		t.Errorf("NeedCommand(redis-server) without it: skipped=%v msg=%q, want a skip with an apt-get hint", r.skipped, r.msg)
	}
}
