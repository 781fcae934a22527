package main

import (
	"runtime/debug"
	"strings"
)

// version describes the binary for `portero --version` from its build
// information: the module version (a tag, a pseudo-version, or (devel) for
// a build from a checkout), the VCS revision and time when the build
// recorded them (go build records them unless -buildvcs=false), and the Go
// release.
func version(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "portero (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var b strings.Builder
	b.WriteString("portero " + v)
	var rev, when string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var parts []string
	if rev != "" {
		r := "revision " + rev
		if modified {
			r += " (modified)"
		}
		parts = append(parts, r)
	}
	if when != "" {
		parts = append(parts, when)
	}
	if bi.GoVersion != "" {
		parts = append(parts, bi.GoVersion)
	}
	if len(parts) > 0 {
		b.WriteString(", " + strings.Join(parts, ", "))
	}
	return b.String()
}
