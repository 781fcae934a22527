package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tt := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"none", nil, false, "portero (no build information)"},
		{"tag", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}, true, "portero v1.2.3, go1.26.8"},
		{"checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs", "git", "vcs.revision", "d4d2e84bf9e2", "vcs.time", "2026-12-01T12:45:54Z", "vcs.modified", "true")}, true,
			"portero (devel), revision d4d2e84bf9e2 (modified), 2026-12-01T12:45:54Z, go1.26.8"},
		{"clean", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201124554-d4d2e84bf9e2"},
			Settings: vcs("vcs.revision", "d4d2e84bf9e2", "vcs.modified", "false")}, true,
			"portero v0.0.0-20261201124554-d4d2e84bf9e2, revision d4d2e84bf9e2"},
		{"empty version", &debug.BuildInfo{}, true, "portero (devel)"},
	} {
		if got := version(tt.bi, tt.ok); got != tt.want {
			t.Errorf("%s: version(...) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestVersionFlag: `portero --version` prints this binary's build
// information (the test binary's: no module version, but the Go release).
func TestVersionFlag(t *testing.T) {
	out, errOut, code := runCmd(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "portero ") || !strings.Contains(out, runtime.Version()) || errOut != "" {
		t.Errorf("portero --version: exit %d, stdout %q, stderr %q; want \"portero VERSION, …, %s\"", code, out, errOut, runtime.Version())
	}
}
