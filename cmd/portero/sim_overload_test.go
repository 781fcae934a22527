package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimOverloadCommands: each experiment prints its CSV header and the
// figures package overloadsim pins, in every format, and draws its charts.
func TestSimOverloadCommands(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, header, row string
		charts            []string
	}{
		{"overload", "mode,offered_per_s,capacity_per_s,throughput_per_s,goodput_per_s,goodput_ratio,p99_latency_s",
			"bounded-deadline,150,100,100.00,100.00,1.000,1.993", []string{"overload.svg"}},
		{"noisy-neighbour", "policy,tenant_class,offered,served,served_ratio",
			"fair,small,3600,3600,1.000", []string{"noisy-neighbour.svg"}},
		{"little", "limiter,service_time_s,admitted_per_s,in_flight",
			"rate,0.5,120.00,60.00", []string{"little.svg", "little-in-flight.svg"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := runCmd(t, "sim", tc.name, "--format", "csv", "--chart", filepath.Join(dir, tc.name+".svg"))
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			lines := strings.Split(out, "\n")
			if lines[0] != tc.header || !strings.Contains(out, "\n"+tc.row+"\n") {
				t.Errorf("sim %s --format csv printed\n%s\nwant header %s and row %s", tc.name, out, tc.header, tc.row)
			}
			for _, c := range tc.charts {
				b, err := os.ReadFile(filepath.Join(dir, c))
				if err != nil || !strings.Contains(string(b), "<svg") {
					t.Errorf("chart %s: %v, not an svg", c, err)
				}
				if !strings.Contains(errs, c) {
					t.Errorf("stderr %q does not name %s", errs, c)
				}
			}
			js, _, code := runCmd(t, "sim", tc.name, "--format", "json")
			var rows []map[string]any
			if code != 0 || json.Unmarshal([]byte(js), &rows) != nil || len(rows) != len(lines)-2 {
				t.Errorf("sim %s --format json: exit %d, %d rows for %d CSV lines:\n%s", tc.name, code, len(rows), len(lines)-2, js)
			}
			table, _, _ := runCmd(t, "sim", tc.name) // table is the default
			if !strings.HasPrefix(table, strings.Split(tc.header, ",")[0]+"  ") {
				t.Errorf("sim %s printed no table:\n%s", tc.name, table)
			}
			for _, bad := range [][]string{{"--format", "xml"}, {"--chart", "x.gif"}, {"extra"}} {
				if _, _, code := runCmd(t, append([]string{"sim", tc.name}, bad...)...); code != 2 {
					t.Errorf("sim %s %v: exit %d, want 2", tc.name, bad, code)
				}
			}
		})
	}
}

// TestOverloadDoc: docs/overload.md shows each experiment's table exactly
// as the command prints it, and the charts committed in docs/overload/ are
// what the commands draw now (the drawing is deterministic).
func TestOverloadDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/overload.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		charts []string
	}{
		{"overload", []string{"overload.svg"}},
		{"noisy-neighbour", []string{"noisy-neighbour.svg"}},
		{"little", []string{"little.svg", "little-in-flight.svg"}},
	} {
		out, errs, code := runCmd(t, "sim", tc.name, "--chart", filepath.Join(dir, tc.charts[0]))
		if code != 0 {
			t.Fatalf("sim %s: exit %d: %s", tc.name, code, errs)
		}
		if block := "$ portero sim " + tc.name + "\n" + out + "```"; !strings.Contains(string(doc), block) {
			t.Errorf("docs/overload.md does not show\n%s", block)
		}
		for _, c := range tc.charts {
			fresh, err := os.ReadFile(filepath.Join(dir, c))
			if err != nil {
				t.Fatal(err)
			}
			committed, err := os.ReadFile(filepath.Join("../../docs/overload", c))
			if err != nil {
				t.Fatal(err)
			}
			if string(fresh) != string(committed) {
				t.Errorf("docs/overload/%s differs from what `portero sim %s --chart` draws now; redraw it (docs/overload.md says how)", c, tc.name)
			}
			if !strings.Contains(string(doc), "(overload/"+c+")") {
				t.Errorf("docs/overload.md does not show overload/%s", c)
			}
		}
	}
}
