// Package testenv holds helpers for tests that need something from the
// machine they run on, such as a redis-server binary. A missing tool fails
// the test with a hint on how to install it: a skipped test would count as
// a pass it never earned.
package testenv

import (
	"os/exec"
	"testing"
)

// installHints says how to get each known command on Debian.
var installHints = map[string]string{
	"redis-server": "apt-get install -y redis-server (or run `make test` as root, which installs it)",
	"redis-cli":    "apt-get install -y redis-tools",
	"promtool":     "apt-get install -y prometheus (Debian's package provides promtool; make deps installs it)",
	"chromium":     "apt-get install -y chromium (or run `make test` as root, which installs it)",
}

// NeedCommand returns the path of the named command, or fails the test
// with an install hint when it is not on PATH.
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
	t.Fatalf("%s not found on PATH: %s", name, hint)
	return ""
}
