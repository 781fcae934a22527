package main

import (
	"encoding/csv"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/redistest"
)

func TestSimRace(t *testing.T) {
	srv := redistest.Start(t)
	out, errOut, code := runCmd(t, "sim", "race", "--redis", srv.Addr(), "--instances", "2", "--requests", "400", "--limit", "50", "--window", "1m", "--rounds", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("output is not CSV: %v\n%s", err, out)
	}
	if len(rows) != 5 || strings.Join(rows[0], ",") != "round,mode,admitted" {
		t.Fatalf("output:\n%s\nwant a header round,mode,admitted and 4 rows", out)
	}
	for _, r := range rows[1:] {
		if r[1] == "atomic" && r[2] != "50" {
			t.Errorf("round %s: atomic admitted %s, want 50", r[0], r[2])
		}
	}
	out, _, code = runCmd(t, "sim", "race", "--redis", srv.Addr(), "--rounds", "1", "--requests", "60", "--format", "table")
	if code != 0 || !strings.Contains(out, "atomic") || !strings.Contains(out, "naive") {
		t.Errorf("table output (exit %d):\n%s", code, out)
	}
}

func TestSimRaceUsage(t *testing.T) {
	for _, args := range [][]string{
		{"sim", "race"},
		{"sim", "race", "--redis", "127.0.0.1:1", "--format", "xml"},
		{"sim", "race", "--redis", "127.0.0.1:1", "--instances", "0"},
		{"sim", "instances", "--instances", "0"},
	} {
		if _, _, code := runCmd(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", args, code)
		}
	}
	if _, errOut, code := runCmd(t, "sim", "race", "--redis", "127.0.0.1:1"); code != 1 || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("unreachable Redis: exit %d, stderr %q; want 1 and the address", code, errOut)
	}
}

func TestSimInstances(t *testing.T) {
	out, errOut, code := runCmd(t, "sim", "instances", "--instances", "3", "--limit", "10", "--requests", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "instances,limit,requests,admitted\n1,10,100,10\n2,10,100,20\n3,10,100,30\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

// TestSimInstancesDoc is the session docs/distributed.md shows, verbatim.
func TestSimInstancesDoc(t *testing.T) {
	out, errOut, code := runCmd(t, "sim", "instances", "--instances", "4", "--format", "table")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `instances  limit  requests  admitted
1          50     400       50
2          50     400       100
3          50     400       150
4          50     400       200
`
	if out != want {
		t.Errorf("portero sim instances --instances 4 --format table printed\n%s\nwant (docs/distributed.md)\n%s", out, want)
	}
}
