package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimFleetCommand: portero sim fleet prints the CSV columns the docs
// name, one row per mode and fleet size, draws its chart, and refuses a
// fleet size out of range as a usage error.
func TestSimFleetCommand(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "fleet.svg")
	out, errs, code := runCmd(t, "sim", "fleet", "--instances", "10,50", "--format", "csv", "--chart", chart)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "mode,instances,limit,requests,worst_window_admitted,early_refusals,store_calls_per_s,") || len(lines) != 7 {
		t.Fatalf("sim fleet --format csv printed\n%s\nwant the header and 6 rows", out)
	}
	for i, prefix := range []string{"exact,10,45,", "leased,10,45,", "local,10,45,", "exact,50,225,", "leased,50,225,", "local,50,225,"} {
		if !strings.HasPrefix(lines[i+1], prefix) {
			t.Errorf("row %d = %s, want it to start %s", i+1, lines[i+1], prefix)
		}
	}
	if b, err := os.ReadFile(chart); err != nil || !strings.Contains(string(b), "<svg") {
		t.Errorf("chart: %v, not an svg", err)
	}
	if _, errs, code = runCmd(t, "sim", "fleet", "--instances", "20000"); code != 2 || !strings.Contains(errs, "20000 instances: want 1 to 10,000") {
		t.Errorf("--instances 20000: exit %d, %s; want a usage error", code, errs)
	}
}

// TestSimFleetDoc is the session docs/distributed.md shows, verbatim.
func TestSimFleetDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/distributed.md")
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "$ portero sim fleet --instances 10,1000\n"
	i := strings.Index(string(doc), cmd)
	if i < 0 {
		t.Fatalf("docs/distributed.md has no %q", cmd)
	}
	want, _, _ := strings.Cut(string(doc[i+len(cmd):]), "```")
	out, errs, code := runCmd(t, "sim", "fleet", "--instances", "10,1000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if out != want {
		t.Errorf("portero sim fleet --instances 10,1000 printed\n%s\nwant (docs/distributed.md)\n%s", out, want)
	}
}
