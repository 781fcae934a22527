package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/sim"
)

// runCmd runs the command line through run and returns what it printed and
// its exit status.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), exitCode(err)
}

// writeFile writes a trace into the test's temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// replayGolden are `portero sim replay`'s golden outputs, checked by hand
// against the worked examples of docs/algorithms.md; the comments give the
// arithmetic.
var replayGolden = []struct {
	name  string
	trace string
	args  []string
	want  string
}{
	{
		// Nine arrivals at once, six places, one out every 0.5 s: 6 queued,
		// departing 0.5 … 3.0 s; 3 dropped, each of which could come
		// back at 0.5 s, when the first departure frees a place.
		name:  "leaky-queue nine at once",
		trace: strings.Repeat("0,a\n", 9),
		args:  []string{"--algorithm", "leaky-queue", "--limit", "6", "--window", "3s"},
		want: `time,key,cost,allowed,remaining,retry_after,departure
0,a,1,true,5,0,0.5
0,a,1,true,4,0,1
0,a,1,true,3,0,1.5
0,a,1,true,2,0,2
0,a,1,true,1,0,2.5
0,a,1,true,0,0,3
0,a,1,false,0,0.5,
0,a,1,false,0,0.5,
0,a,1,false,0,0.5,
`,
	},
	{
		// Windows [0,10) and [10,20) of 3: the instant 10 belongs to the
		// window that starts there ("8 9 9 | 10 11 12"). 9.5 waits 0.5 s
		// for the boundary; 12.5 waits until 20.
		name:  "fixed-window boundary at 10 s",
		trace: "time,key\n8,c\n9,c\n9,c\n9.5,c\n10,c\n11,c\n12,c\n12.5,c\n",
		args:  []string{"--algorithm", "fixed-window", "--limit", "3", "--window", "10s", "--format", "table"},
		want: `time  key  cost  allowed  remaining  retry_after
8     c    1     true     2          0
9     c    1     true     1          0
9     c    1     true     0          0
9.5   c    1     false    0          0.5
10    c    1     true     2          0
11    c    1     true     1          0
12    c    1     true     0          0
12.5  c    1     false    0          7.5
`,
	},
	{
		// r = 0.5/s, B = 1: "dos segundos dan una ficha entera". At 1 s the
		// bucket holds half a token: (1 − 0.5)/0.5 = 1 s to wait; at 3.5 s
		// three quarters: 0.5 s.
		name:  "token-bucket rate 0.5",
		trace: "0,k\n1,k\n2,k\n3,k\n3.5,k\n",
		args:  []string{"--algorithm", "token-bucket", "--limit", "1", "--window", "1s", "--rate", "0.5", "--format", "json"},
		want: `[
 {"time":0,"key":"k","cost":1,"allowed":true,"remaining":0,"retry_after":0},
 {"time":1,"key":"k","cost":1,"allowed":false,"remaining":0,"retry_after":1},
 {"time":2,"key":"k","cost":1,"allowed":true,"remaining":0,"retry_after":0},
 {"time":3,"key":"k","cost":1,"allowed":false,"remaining":0,"retry_after":1},
 {"time":3.5,"key":"k","cost":1,"allowed":false,"remaining":0,"retry_after":0.5}
]
`,
	},
	{
		// The sliding-counter worked example: L = 100, W = 60 s, 80 in
		// the previous window, 30 in this one, a request 15 s in:
		// 80·0.75 + 30 = 90 < 100, admitted, and then 91 + (n−1) < 100
		// leaves n = 9. Costs let the trace say "80" and "30" in a line.
		// A cost of 30 is admitted when estimate + 29 < 100: not at 60 s
		// (80 + 29), but after 80·(1 − e/60) < 71, e > 6.75 s — and
		// at 70 s (80·5/6 + 29 ≈ 95.7); then 96.7 + (n−1) < 100, n = 4.
		name:  "sliding-counter estimate",
		trace: "0,u,80\n60,u,30\n70,u,30\n75,u\n",
		args:  []string{"--algorithm", "sliding-counter", "--limit", "100", "--window", "1m"},
		want: `time,key,cost,allowed,remaining,retry_after
0,u,80,true,20,0
60,u,30,false,20,6.750000001
70,u,30,true,4,0
75,u,1,true,9,0
`,
	},
	{
		// Costs and keys: a's export of 4 fits the burst of 5, b is
		// counted apart; a's second export needs 3 more tokens at 2/s.
		name:  "gcra costs and keys",
		trace: "0,a,4\n0,b,5\n0,a,4\n",
		args:  []string{"--algorithm", "gcra", "--limit", "2", "--window", "1s", "--burst", "5"},
		want: `time,key,cost,allowed,remaining,retry_after
0,a,4,true,1,0
0,b,5,true,0,0
0,a,4,false,1,1.5
`,
	},
	{
		name:  "leaky-queue json departures",
		trace: "0,q\n0,q\n0.25,q\n",
		args:  []string{"--algorithm", "leaky-queue", "--limit", "2", "--window", "1s", "--format", "json"},
		want: `[
 {"time":0,"key":"q","cost":1,"allowed":true,"remaining":1,"retry_after":0,"departure":0.5},
 {"time":0,"key":"q","cost":1,"allowed":true,"remaining":0,"retry_after":0,"departure":1},
 {"time":0.25,"key":"q","cost":1,"allowed":false,"remaining":0,"retry_after":0.25,"departure":null}
]
`,
	},
	{
		name:  "leaky-queue table",
		trace: "0,q\n0,q\n0,q\n",
		args:  []string{"--algorithm", "leaky-queue", "--limit", "2", "--window", "1s", "--format", "table"},
		want: `time  key  cost  allowed  remaining  retry_after  departure
0     q    1     true     1          0            0.5
0     q    1     true     0          0            1
0     q    1     false    0          0.5          -
`,
	},
}

func TestReplayGolden(t *testing.T) {
	for _, tc := range replayGolden {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "trace.csv", tc.trace)
			args := append([]string{"sim", "replay", "--trace", path}, tc.args...)
			out, errOut, code := runCmd(t, args...)
			if code != 0 {
				t.Fatalf("portero %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
			}
			if out != tc.want {
				t.Errorf("portero %s printed\n%s\nwant\n%s", strings.Join(args, " "), out, tc.want)
			}
		})
	}
}

func TestReplayMalformedTrace(t *testing.T) {
	for _, tc := range []struct {
		name, trace string
		args        []string
		msg         string // what stderr must say, besides the line
		line        int
	}{
		{"bad number", "0,a\n1,a\nx,a\n", nil, `time "x"`, 3},
		{"decreasing time", "0,a\n2,a\n1,a\n2,a\n", nil, "goes back", 3},
		{"zero cost", "0,a\n0,a,0\n", nil, "cost 0", 2},
		{"too many columns", "time,key,cost\n0,a,1\n0,a,1,9\n", nil, "4 fields", 3},
		{"too few columns", "0\n", nil, "1 fields", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "bad.csv", tc.trace)
			args := []string{"sim", "replay", "--algorithm", "fixed-window", "--limit", "10", "--window", "1s", "--trace", path}
			args = append(args, tc.args...) // a repeated flag overrides
			for _, format := range []string{"csv", "json", "table"} {
				out, errOut, code := runCmd(t, append(args, "--format", format)...)
				if code != 2 {
					t.Errorf("%s: exit %d, want 2 (stderr %q)", format, code, errOut)
				}
				if out != "" {
					t.Errorf("%s: printed %q, want no decisions at all", format, out)
				}
				if want := "line " + strconv.Itoa(tc.line) + ":"; !strings.Contains(errOut, want) || !strings.Contains(errOut, tc.msg) || !strings.Contains(errOut, path) {
					t.Errorf("%s: stderr %q, want it to name %s, %q and the file", format, errOut, want, tc.msg)
				}
			}
		})
	}
}

// A cost above what the rule can ever admit is a refusal that says it can
// never pass (retry_after never, null in JSON), the same answer as at every
// door; the replay goes on, and nothing was counted for it.
func TestReplayCostNeverPasses(t *testing.T) {
	for _, tc := range []struct {
		trace  string
		args   []string
		format string
		want   string
	}{
		{"0,a,2\n0,a,11\n0,a,8\n", nil, "csv",
			"time,key,cost,allowed,remaining,retry_after\n0,a,2,true,8,0\n0,a,11,false,8,never\n0,a,8,true,0,0\n"},
		{"0,a,3\n", []string{"--algorithm", "token-bucket", "--burst", "2"}, "json",
			"[\n {\"time\":0,\"key\":\"a\",\"cost\":3,\"allowed\":false,\"remaining\":2,\"retry_after\":null}\n]\n"},
		{"0,a,11\n", nil, "table",
			"time  key  cost  allowed  remaining  retry_after\n0     a    11    false    10         never\n"},
	} {
		path := writeFile(t, "big.csv", tc.trace)
		args := append([]string{"sim", "replay", "--algorithm", "fixed-window", "--limit", "10", "--window", "1s", "--trace", path, "--format", tc.format}, tc.args...)
		out, errOut, code := runCmd(t, args...)
		if code != 0 || out != tc.want {
			t.Errorf("%v: exit %d, stderr %q, printed\n%s\nwant\n%s", tc.args, code, errOut, out, tc.want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	trace := writeFile(t, "ok.csv", "0,a\n")
	replay := func(extra ...string) []string {
		return append([]string{"sim", "replay", "--algorithm", "gcra", "--limit", "5", "--window", "1s", "--trace", trace}, extra...)
	}
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"unknown command", []string{"nonsense"}, "unknown command"},
		{"unknown sim command", []string{"sim", "nonsense"}, "unknown command"},
		{"unknown flag", replay("--frobnicate"), "unknown flag"},
		{"unknown algorithm", replay("--algorithm", "magic"), `unknown algorithm "magic"`},
		{"missing limit", []string{"sim", "replay", "--algorithm", "gcra", "--window", "1s", "--trace", trace}, "--limit is required"},
		{"missing trace", []string{"sim", "replay", "--algorithm", "gcra", "--limit", "1", "--window", "1s"}, "--trace is required"},
		{"bad window", replay("--window", "soon"), "invalid argument"},
		{"zero limit", replay("--limit", "0"), "invalid limit"},
		{"negative rate", replay("--rate", "-1"), "invalid limit"},
		{"bad format", replay("--format", "xml"), `--format "xml"`},
		{"missing file", replay("--trace", filepath.Join(t.TempDir(), "none.csv")), "no such file"},
		{"unknown store", replay("--store", "cassandra://x"), "unknown store"},
		{"burst bad format", []string{"sim", "burst", "--format", "xml"}, `--format "xml"`},
		{"burst bad chart", []string{"sim", "burst", "--out", filepath.Join(t.TempDir(), "chart.gif")}, ".svg or .png"},
		{"stray argument", []string{"sim", "burst", "extra"}, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runCmd(t, tc.args...)
			if code != 2 {
				t.Errorf("portero %s: exit %d, want 2 (stderr %q)", strings.Join(tc.args, " "), code, errOut)
			}
			if !strings.Contains(errOut, tc.msg) {
				t.Errorf("portero %s: stderr %q, want it to say %q", strings.Join(tc.args, " "), errOut, tc.msg)
			}
			if out != "" && !strings.Contains(out, "Usage") {
				t.Errorf("portero %s: printed %q", strings.Join(tc.args, " "), out)
			}
		})
	}
}

func TestReplayStdin(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdin
	os.Stdin = r
	t.Cleanup(func() { os.Stdin = old; r.Close() })
	go func() { w.WriteString("0,a\n0,a\n"); w.Close() }()
	out, errOut, code := runCmd(t, "sim", "replay", "--algorithm", "sliding-log", "--limit", "1", "--window", "1s", "--trace", "-")
	want := "time,key,cost,allowed,remaining,retry_after\n0,a,1,true,0,0\n0,a,1,false,0,1\n"
	if code != 0 || out != want {
		t.Errorf("replay from stdin: exit %d, stderr %q, printed\n%s\nwant\n%s", code, errOut, out, want)
	}
}

func TestBurstCommand(t *testing.T) {
	out, errOut, code := runCmd(t, "sim", "burst")
	want := `algorithm,max_admitted_in_any_window
fixed-window,20
sliding-log,10
sliding-counter,11
token-bucket,19
leaky-queue,10
`
	if code != 0 || out != want {
		t.Errorf("portero sim burst: exit %d, stderr %q, printed\n%s\nwant\n%s", code, errOut, out, want)
	}

	out, _, code = runCmd(t, "sim", "burst", "--format", "table")
	wantTable := `algorithm        max_admitted_in_any_window
fixed-window     20
sliding-log      10
sliding-counter  11
token-bucket     19
leaky-queue      10
`
	if code != 0 || out != wantTable {
		t.Errorf("portero sim burst --format table: exit %d, printed\n%s\nwant\n%s", code, out, wantTable)
	}
}

func TestBurstCharts(t *testing.T) {
	dir := t.TempDir()
	for _, ext := range []string{".svg", ".png"} {
		path := filepath.Join(dir, "burst"+ext)
		out, errOut, code := runCmd(t, "sim", "burst", "--out", path)
		if code != 0 || !strings.HasPrefix(out, "algorithm,") {
			t.Fatalf("portero sim burst --out %s: exit %d, stderr %q", path, code, errOut)
		}
		over := filepath.Join(dir, "burst-over-time"+ext)
		for _, p := range []string{path, over} {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("--out %s: %v", path, err)
			}
			var magic string
			switch ext {
			case ".svg":
				magic = "<svg"
			case ".png":
				magic = "\x89PNG"
			}
			if !bytes.Contains(b[:min(len(b), 512)], []byte(magic)) {
				t.Errorf("%s does not look like a %s file", p, ext)
			}
			if !strings.Contains(errOut, p) {
				t.Errorf("stderr %q does not name %s", errOut, p)
			}
		}
	}
}

// TestBurstTraceReplays replays testdata/burst.csv, the burst trace as data,
// through each algorithm with `portero sim replay` and finds the burst
// experiment's figures again in what it prints.
func TestBurstTraceReplays(t *testing.T) {
	want := map[string]int{"fixed-window": 20, "sliding-log": 10, "sliding-counter": 11, "token-bucket": 19, "leaky-queue": 10}
	for alg, figure := range want {
		out, errOut, code := runCmd(t, "sim", "replay", "--algorithm", alg, "--limit", "10", "--window", "1s", "--trace", "../../testdata/burst.csv")
		if code != 0 {
			t.Fatalf("replay %s: exit %d, %s", alg, code, errOut)
		}
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 81 {
			t.Fatalf("replay %s: %d rows, want a header and 80", alg, len(rows))
		}
		var through []time.Duration
		for _, r := range rows[1:] {
			if r[3] != "true" {
				continue
			}
			at := r[0]
			if alg == "leaky-queue" {
				at = r[6]
			}
			d, err := sim.ParseSeconds(at)
			if err != nil {
				t.Fatal(err)
			}
			through = append(through, d)
		}
		if got := sim.MaxInWindow(through, time.Second); got != figure {
			t.Errorf("replay of testdata/burst.csv under %s: at most %d in a second, want %d", alg, got, figure)
		}
	}
}

func TestExitCode(t *testing.T) {
	if got := exitCode(nil); got != 0 {
		t.Errorf("exitCode(nil) = %d, want 0", got)
	}
	if got := exitCode(os.ErrNotExist); got != 1 {
		t.Errorf("exitCode(plain error) = %d, want 1", got)
	}
	if got := exitCode(usageErr(os.ErrNotExist)); got != 2 {
		t.Errorf("exitCode(usage error) = %d, want 2", got)
	}
	if usageErr(nil) != nil {
		t.Error("usageErr(nil) != nil")
	}
	for _, tt := range []struct {
		err  error
		want int
	}{
		{checkFailed(errRefused), 1},
		{checkFailed(fmt.Errorf("server says: %w", errRefused)), 1},
		{checkFailed(usageErr(os.ErrNotExist)), 2},
		{checkFailed(os.ErrNotExist), 3},
		{checkFailed(nil), 0},
	} {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(checkFailed(%v)) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
