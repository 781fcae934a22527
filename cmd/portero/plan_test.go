package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config"
)

var workedPlan = []string{"plan", "--capacity", "1000", "--margin", "30%", "--units-per-request", "2", "--latency", "200ms"}

// The worked example on pencil and paper: 1,000 writes/s, 30% margin, 2 writes per
// request, 200 ms → rate 350 (1000 × 0.7 ÷ 2), burst 350 (the rate),
// concurrency 70 (350 × 0.2, Little's law); 500 at once is what the
// partition absorbs (1000 ÷ 2).
func TestPlanWorkedExample(t *testing.T) {
	out, errOut, code := runCmd(t, workedPlan...)
	want := `rate         350/s  1000 units/s × (1 − 30%) = 700 units/s, ÷ 2 units per request
burst        350    requests at once: the rate, an honest start; raise it with a reason
concurrency  70     in flight: 350/s × 200ms (Little's law)
max burst    500    what the bottleneck absorbs at once: 1000 units ÷ 2 units per request
`
	if code != 0 || out != want {
		t.Fatalf("plan (exit %d, stderr %q):\n%s\nwant:\n%s", code, errOut, out, want)
	}
	out, _, code = runCmd(t, append(workedPlan, "--format", "json")...)
	var got struct {
		Rate, Burst, Concurrency, MaxBurst int64
		Warnings                           []string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("plan --format json = %q (exit %d): %v", out, code, err)
	}
	if got.Rate != 350 || got.Burst != 350 || got.Concurrency != 70 || len(got.Warnings) != 0 {
		t.Errorf("plan --format json = %+v, want rate 350, burst 350, concurrency 70, no warnings", got)
	}
	if !strings.Contains(out, `"rate": 350,`) || !strings.Contains(out, `"max_burst": 500,`) {
		t.Errorf("plan --format json lacks the rate or max_burst members:\n%s", out)
	}
}

// --format yaml writes a configuration that `portero config validate`
// accepts, with the planned limit as a token bucket on a global key; a
// burst of twice the rate ("double it, out of habit") is warned
// about in every format and still written as asked.
func TestPlanYAMLValidates(t *testing.T) {
	for _, tc := range []struct {
		extra []string
		limit string
		warn  bool
	}{
		{nil, "350/s burst 350", false},
		{[]string{"--burst", "700", "--name", "dynamo", "--key", "tenant"}, "350/s burst 700", true},
	} {
		out, errOut, code := runCmd(t, append(append(workedPlan, "--format", "yaml"), tc.extra...)...)
		if code != 0 {
			t.Fatalf("plan --format yaml %v: exit %d: %s", tc.extra, code, errOut)
		}
		if got := strings.Contains(out, "# WARNING: burst 700 × 2 units per request = 1400 units at once"); got != tc.warn {
			t.Errorf("plan --format yaml %v: warning shown %v, want %v:\n%s", tc.extra, got, tc.warn, out)
		}
		path := writeFile(t, "plan.yaml", out)
		vout, verr, code := runCmd(t, "config", "validate", path)
		if code != 0 || !strings.Contains(vout, "ok (1 rule, 1 route") {
			t.Fatalf("config validate of plan's YAML: exit %d, %q %q:\n%s", code, vout, verr, out)
		}
		c, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		r := c.Policy.Rules()[0]
		if r.Algorithm != portero.TokenBucket || r.Limit.String() != tc.limit {
			t.Errorf("plan's rule: %s %s, want token-bucket %s", r.Algorithm, r.Limit, tc.limit)
		}
		table, _, _ := runCmd(t, append(workedPlan, tc.extra[:min(2, len(tc.extra))]...)...)
		if got := strings.Contains(table, "warning: burst 700"); got != tc.warn {
			t.Errorf("plan %v (table): warning shown %v, want %v:\n%s", tc.extra, got, tc.warn, table)
		}
	}
}

// The other question: 500,000 per day at a steady 10/s runs out
// after 50,000 s (13.9 h); the day lasts at 500000 ÷ 86400 = 5.787/s.
func TestPlanQuota(t *testing.T) {
	args := []string{"plan", "quota", "--quota", "500000/day", "--rate", "10/s"}
	out, errOut, code := runCmd(t, args...)
	want := `quota           500000/day  500000 per day (24 h)
rate            10/s        10/s
runs out after  50000 s     13.9 h, then requests are refused for the last 10.1 h of the day
sustainable     5.787/s     the steady rate at which the quota lasts the day
`
	if code != 0 || out != want {
		t.Fatalf("plan quota (exit %d, %q):\n%s\nwant:\n%s", code, errOut, out, want)
	}
	out, _, _ = runCmd(t, append(args, "--format", "json")...)
	var got struct {
		Seconds float64 `json:"runs_out_after_seconds"`
		Hours   float64 `json:"runs_out_after_hours"`
		Period  string  `json:"period"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Seconds != 50000 || got.Period != "day" || got.Hours < 13.88 || got.Hours > 13.89 {
		t.Errorf("plan quota --format json = %s (%v), want 50000 s, 13.89 h, period day", out, err)
	}
	out, _, code = runCmd(t, append(args, "--format", "yaml")...)
	path := writeFile(t, "quota.yaml", out)
	if _, verr, vcode := runCmd(t, "config", "validate", path); code != 0 || vcode != 0 {
		t.Fatalf("config validate of plan quota's YAML: exit %d: %s\n%s", vcode, verr, out)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	q := c.Policy.Rule("quota")
	if q == nil || q.Algorithm != portero.FixedWindow || q.Limit != portero.PerDay(500000) {
		t.Errorf("plan quota's quota rule = %+v, want fixed-window 500000/day", q)
	}
}

func TestPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"plan", "--margin", "30%", "--latency", "200ms"}, "--capacity and --latency are required"},
		{[]string{"plan", "--capacity", "1000"}, "--capacity and --latency are required"},
		{[]string{"plan", "--capacity", "lots", "--latency", "1s"}, "--capacity"},
		{[]string{"plan", "--capacity", "1000", "--margin", "thirty", "--latency", "1s"}, "--margin"},
		{[]string{"plan", "--capacity", "1000", "--margin", "100%", "--latency", "1s"}, "margin"},
		{[]string{"plan", "--capacity", "1000", "--units-per-request", "0", "--latency", "1s"}, "units per request"},
		{[]string{"plan", "--capacity", "1000", "--latency", "-1s"}, "latency"},
		{[]string{"plan", "--capacity", "1000", "--latency", "1s", "--burst", "-2"}, "burst"},
		{[]string{"plan", "--capacity", "1000", "--latency", "1s", "--format", "xml"}, `--format "xml"`},
		{[]string{"plan", "--capacity", "1000", "--latency", "1s", "--name", "bad name"}, "--name"},
		{[]string{"plan", "--capacity", "1000", "--latency", "1s", "--key", "nonsense"}, "--key"},
		{[]string{"plan", "extra", "--capacity", "1000", "--latency", "1s"}, "unknown command"},
		{[]string{"plan", "quota", "--quota", "500000/day"}, "--quota and --rate are required"},
		{[]string{"plan", "quota", "--quota", "500000/fortnight", "--rate", "10/s"}, "--quota"},
		{[]string{"plan", "quota", "--quota", "500000/day", "--rate", "10/day"}, "not a rate"},
	} {
		_, errOut, code := runCmd(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.mention) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, errOut, tc.mention)
		}
	}
}

// Calendar quotas through `portero config validate`: a quota needs no
// algorithm (fixed-window), and each mistake is reported with its line and
// column.
func TestConfigValidateQuotas(t *testing.T) {
	good := writeFile(t, "quotas.yaml", `upstreams:
  api: {url: "http://127.0.0.1:3000"}
routes:
  - upstream: api
rules:
  - {name: rate, key: "header:X-API-Key", algorithm: token-bucket, limit: 100/s}
  - {name: daily, key: "header:X-API-Key", limit: 500000/day tz Europe/Madrid}
  - {name: monthly, key: "header:X-API-Key", limit: 100000/month offset 14d}
  - {name: weekly, key: "header:X-API-Key", algorithm: fixed-window, limit: 10/week offset 6d tz America/New_York}
`)
	if out, errOut, code := runCmd(t, "config", "validate", good); code != 0 || !strings.Contains(out, "ok (4 rules") {
		t.Fatalf("config validate of quotas: exit %d %q %q", code, out, errOut)
	}
	bad := writeFile(t, "bad.yaml", `upstreams:
  api: {url: "http://127.0.0.1:3000"}
routes:
  - upstream: api
rules:
  - name: sliding
    key: ip
    algorithm: sliding-counter
    limit: 500000/day
  - name: zone
    key: ip
    limit: 10/month tz Mars/Base
  - name: days
    key: ip
    limit: 10/2days
`)
	_, errOut, code := runCmd(t, "config", "validate", bad)
	for _, want := range []string{
		"bad.yaml:6:5: rules[0]: rule \"sliding\": invalid limit: 500000/day is a calendar quota, counted by fixed-window only, not sliding-counter",
		"bad.yaml:12:12: rules[1].limit: 10/month tz Mars/Base: invalid limit: zone \"Mars/Base\"",
		"bad.yaml:15:12: rules[2].limit: 10/2days: invalid limit: window \"2days\": a calendar period is one day, week or month",
	} {
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("config validate: exit %d, stderr:\n%s\nwant a line with %q", code, errOut, want)
		}
	}
}

// Every "$ portero …" block of docs/plans.md is that command's output,
// verbatim.
func TestPlanDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/plans.md")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir("../..") // the page's commands name files from the repository's root
	// The fenced blocks, in order: a line starting with ``` opens or closes one.
	var blocks []string
	var cur *strings.Builder
	for _, line := range strings.SplitAfter(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "```") && cur == nil:
			cur = new(strings.Builder)
		case strings.HasPrefix(line, "```"):
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line)
		}
	}
	n := 0
	for _, b := range blocks {
		cmdLine, want, ok := strings.Cut(b, "\n")
		if !ok || !strings.HasPrefix(cmdLine, "$ portero ") {
			continue
		}
		n++
		out, errOut, code := runCmd(t, strings.Fields(strings.TrimPrefix(cmdLine, "$ portero "))...)
		if code != 0 || out != want {
			t.Errorf("%s (exit %d, %s) printed\n%s\ndocs/plans.md shows\n%s", cmdLine, code, errOut, out, want)
		}
	}
	if n < 7 {
		t.Errorf("found %d command blocks in docs/plans.md, want the 7 it shows", n)
	}
}
