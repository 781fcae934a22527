package main

import (
	"runtime/debug"

	"github.com/portero-rl/portero/internal/buildinfo"
)

// version describes the binary for `portero --version` (package buildinfo:
// the same description as the admin API's /api/version and the metric
// portero_build_info).
func version(bi *debug.BuildInfo, ok bool) string { return buildinfo.From(bi, ok).String() }
