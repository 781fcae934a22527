// Package buildinfo describes the running binary from what the Go
// toolchain records in it (module version, VCS revision, time and modified
// flag, Go release): the one description `portero --version`,
// /api/version and the metric portero_build_info show.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Info is what a binary says about its build; empty fields were not
// recorded.
type Info struct {
	// Version is the main module's version: a tag, a pseudo-version, or
	// "(devel)" for a build from a checkout.
	Version string `json:"version"`
	// Revision and Time are the VCS revision and commit time; Modified a
	// build from a working tree with uncommitted changes.
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goversion,omitempty"`
	// Known is false when the binary carries no build information at all.
	Known bool `json:"-"`
}

// Read returns the running binary's Info.
func Read() Info { return From(debug.ReadBuildInfo()) }

// From returns the Info of bi, as debug.ReadBuildInfo returns it (ok false
// when there is none).
func From(bi *debug.BuildInfo, ok bool) Info {
	if !ok || bi == nil {
		return Info{Version: "(devel)"}
	}
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion, Known: true}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the line `portero --version` prints, such as
// "portero (devel), revision d4d2e84bf9e2 (modified), 2026-12-01T12:45:54Z, go1.26.8".
func (in Info) String() string {
	if !in.Known {
		return "portero (no build information)"
	}
	var b strings.Builder
	b.WriteString("portero " + in.Version)
	var parts []string
	if in.Revision != "" {
		r := "revision " + in.Revision
		if in.Modified {
			r += " (modified)"
		}
		parts = append(parts, r)
	}
	if in.Time != "" {
		parts = append(parts, in.Time)
	}
	if in.GoVersion != "" {
		parts = append(parts, in.GoVersion)
	}
	if len(parts) > 0 {
		b.WriteString(", " + strings.Join(parts, ", "))
	}
	return b.String()
}
