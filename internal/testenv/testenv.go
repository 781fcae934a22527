// Package testenv holds helpers for tests that need something from the
// machine they run on, such as a redis-server binary.
//
// A missing tool skips the test on a developer's machine, with a hint on how
// to install it, but fails it where the tool is required: under CI=true or
// PORTERO_REQUIRE_REDIS=1 (which `make test` exports). A skipped test in CI
// would count as a pass it never earned.
package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// installHints says how to get each known command on Debian.
var installHints = map[string]string{
	"redis-server": "apt-get install -y redis-server (or run `make test` as root, which installs it)",
	"redis-cli":    "apt-get install -y redis-tools",
	"promtool":     "apt-get install -y prometheus (Debian's package provides promtool; make deps installs it)",
	"chromium":     "apt-get install -y chromium (or run `make test` as root, which installs it)",
}

// Required reports whether missing tools must fail tests rather than skip
// them: when CI is "true" or PORTERO_REQUIRE_REDIS is "1".
func Required() bool {
	return strings.EqualFold(os.Getenv("CI"), "true") || os.Getenv("PORTERO_REQUIRE_REDIS") == "1"
}

// NeedCommand returns the path of the named command. When it is not on PATH
// the test is skipped with an install hint, or fails when Required.
func NeedCommand(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	hint := installHints[name]
	if hint == "" {
		hint = "install it"
	}
	msg := name + " not found on PATH: " + hint
	if Required() {
		t.Fatalf("%s (required because CI=true or PORTERO_REQUIRE_REDIS=1)", msg)
		return ""
	}
	t.Skip(msg)
	return ""
}
