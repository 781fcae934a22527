package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestSimHerdCommand(t *testing.T) {
	out, errs, code := runCmd(t, "sim", "herd")
	if code != 0 {
		t.Fatalf("sim herd: exit %d, stderr %s", code, errs)
	}
	// The herd's waves: without jitter all 200 come back together at 1, 3
	// and 7 s; told Retry-After: 1 and waiting exactly that, at 1, 2, 3 s;
	// with full jitter, or with jitter after the Retry-After, the peak per
	// 100 ms is far lower.
	for _, want := range []string{
		"no-jitter          peak  200 retries per 100ms (at 1s); waves at [1s 3s 7s]",
		"retry-after        peak  200 retries per 100ms (at 1s); waves at [1s 2s 3s]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sim herd: line %q missing:\n%s", want, out)
		}
	}
	for _, name := range []string{"full-jitter ", "retry-after+jitter "} {
		if p := herdPeak(t, out, name); p <= 0 || p > 70 {
			t.Errorf("%s peak per 100 ms = %d, want well below 200 (at most 70)", name, p)
		}
	}
	// The flags reach the experiment: Retry-After 2 s, no wave before it.
	out, errs, code = runCmd(t, "sim", "herd", "--retry-after", "2s", "--retry-after-jitter", "500ms")
	if code != 0 || !strings.Contains(out, "retry-after        peak  200 retries per 100ms (at 2s); waves at [2s 4s 6s]") || !strings.Contains(out, "Retry-After 2s (+ up to 500ms of jitter)") {
		t.Errorf("sim herd --retry-after 2s --retry-after-jitter 500ms: exit %d, stderr %s, output:\n%s", code, errs, out)
	}
	if _, _, code := runCmd(t, "sim", "herd", "--retry-after-jitter", "-1s"); code != 2 {
		t.Errorf("sim herd --retry-after-jitter -1s: exit %d, want 2", code)
	}
}

// herdPeak reads the peak of the variant whose summary line starts with
// prefix.
func herdPeak(t *testing.T, out, prefix string) int {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			var peak int
			if len(f) < 3 {
				t.Fatalf("%s line %q", prefix, line)
			}
			if _, err := fmt.Sscan(f[2], &peak); err != nil {
				t.Fatalf("%s peak %q: %v", prefix, f[2], err)
			}
			return peak
		}
	}
	t.Fatalf("no %q line in:\n%s", prefix, out)
	return 0
}

func TestSimRetryStormCommand(t *testing.T) {
	out, errs, code := runCmd(t, "sim", "retry-storm", "--format", "csv")
	if code != 0 {
		t.Fatalf("sim retry-storm: exit %d, stderr %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "t_s,immediate_offered,") || len(lines) != 61 {
		t.Fatalf("sim retry-storm csv: header %q and %d lines, want t_s,immediate_offered,... and 61", lines[0], len(lines))
	}
	// At t = 20 s, inside the incident: the immediate client offers about
	// 4× the demand, Portero's client about what the service accepts.
	head := strings.Split(lines[0], ",")
	row := strings.Split(lines[21], ",")
	col := func(name string) float64 {
		for i, h := range head {
			if h == name {
				v, err := strconv.ParseFloat(row[i], 64)
				if err != nil {
					t.Fatalf("column %s = %q: %v", name, row[i], err)
				}
				return v
			}
		}
		t.Fatalf("no column %s in %v", name, head)
		return 0
	}
	if row[0] != "20" {
		t.Fatalf("row 21 = %v, want t = 20", row)
	}
	if v := col("immediate_offered"); v < 300 || v > 400 {
		t.Errorf("immediate client offers %v/s during the incident, want 300–400 (3–4× the demand of 100)", v)
	}
	if v, acc := col("portero_offered"), col("portero_accepted"); v > 1.5*acc || acc <= 0 {
		t.Errorf("Portero's client offers %v/s during the incident while %v/s are accepted, want within 50%%", v, acc)
	}
}

func TestSimClientChartsAndErrors(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"herd", "retry-storm"} {
		p := filepath.Join(dir, name+".svg")
		if _, errs, code := runCmd(t, "sim", name, "--out", p); code != 0 {
			t.Fatalf("sim %s --out: exit %d: %s", name, code, errs)
		}
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "<svg") {
			t.Errorf("sim %s --out %s: %v, not an svg", name, p, err)
		}
		if _, _, code := runCmd(t, "sim", name, "--format", "xml"); code != 2 {
			t.Errorf("sim %s --format xml: exit %d, want 2", name, code)
		}
		if _, _, code := runCmd(t, "sim", name, "--out", filepath.Join(dir, "x.gif")); code != 2 {
			t.Errorf("sim %s --out x.gif: exit %d, want 2", name, code)
		}
	}
	if _, _, code := runCmd(t, "sim", "herd", "--clients", "-5"); code != 2 {
		t.Errorf("sim herd --clients -5: exit %d, want 2", code)
	}
}
