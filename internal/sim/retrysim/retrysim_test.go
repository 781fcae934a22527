package retrysim

import (
	"bytes"
	"encoding/csv"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/sim"
)

func summary(t *testing.T, r StormResult, s Strategy) StormSummary {
	t.Helper()
	for _, x := range r.Summary {
		if x.Strategy == s {
			return x
		}
	}
	t.Fatalf("no summary for %s", s)
	return StormSummary{}
}

func TestRetryStormDefaults(t *testing.T) {
	r, err := RunRetryStorm(StormConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	imm, per, pol := summary(t, r, Immediate), summary(t, r, PerRequest), summary(t, r, Portero)

	// Immediate retries: the 90 refused of every 100 new requests come back
	// 3 times at once: 10 + 90·4 = 370/s, approaching 400, 4 × the demand.
	if imm.Offered < 360 || imm.Offered > 400 {
		t.Errorf("immediate offered %.1f/s during the incident, want ~370 (in [360, 400])", imm.Offered)
	}
	if imm.Accepted != 10 {
		t.Errorf("immediate accepted %.1f/s, want the capacity 10", imm.Accepted)
	}
	// Polite per request, alone, only delays the same amplification.
	if per.Offered < 300 {
		t.Errorf("per-request offered %.1f/s, want > 300: in an open system, per-request backoff only shifts the retries", per.Offered)
	}
	// The portero client stays within 10% of what the service accepts and
	// is barely refused at all.
	if pol.Offered > 1.1*r.Config.Incident || pol.Offered < 0.9*r.Config.Incident {
		t.Errorf("portero offered %.1f/s, want within 10%% of the capacity %v", pol.Offered, r.Config.Incident)
	}
	if pol.Offered > 1.1*pol.Accepted {
		t.Errorf("portero offered %.1f/s but %.1f/s accepted: want offered within 10%% of accepted", pol.Offered, pol.Accepted)
	}
	if pol.Succeeded <= imm.Succeeded {
		t.Errorf("portero served %d requests, immediate %d: pacing should serve more (the backlog drains after the incident)", pol.Succeeded, imm.Succeeded)
	}
	total := int(r.Config.Rate * r.Config.Duration.Seconds())
	for _, s := range r.Summary {
		if s.Succeeded+s.Failed+s.Unsent != total {
			t.Errorf("%s: %d ok + %d failed + %d unsent != %d requests", s.Strategy, s.Succeeded, s.Failed, s.Unsent, total)
		}
	}
	// Before the incident every strategy offers the demand.
	for i, s := range r.Summary {
		if got := r.Offered[i][5]; got != 100 {
			t.Errorf("%s offered %v/s at t=5s, want 100", s.Strategy, got)
		}
	}
}

func TestRetryStormRefuseAll(t *testing.T) {
	// A service that refuses everything: exactly 4 × the demand, 400/s.
	r, err := RunRetryStorm(StormConfig{Incident: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := summary(t, r, Immediate).Offered; got != 400 {
		t.Errorf("immediate offered %v/s against a service refusing everything, want 400", got)
	}
	if got := summary(t, r, Portero).Offered; got > 2 {
		t.Errorf("portero offered %v/s to a service accepting nothing, want <= 2 (a probe per Retry-After)", got)
	}
}

func TestRetryStormOtherCapacity(t *testing.T) {
	r, err := RunRetryStorm(StormConfig{Incident: 50, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	if pol := summary(t, r, Portero); pol.Offered < 45 || pol.Offered > 55 {
		t.Errorf("portero offered %.1f/s at capacity 50, want within 10%%", pol.Offered)
	}
	if imm := summary(t, r, Immediate); imm.Offered < 200 {
		t.Errorf("immediate offered %.1f/s at capacity 50, want >= 200 (50 + 50·4 = 250)", imm.Offered)
	}
}

func TestRetryStormDeterministic(t *testing.T) {
	a, _ := RunRetryStorm(StormConfig{Seed: 3, Duration: 20 * time.Second, IncidentEnd: 15 * time.Second})
	b, _ := RunRetryStorm(StormConfig{Seed: 3, Duration: 20 * time.Second, IncidentEnd: 15 * time.Second})
	if !reflect.DeepEqual(a, b) {
		t.Error("two runs with the same seed differ")
	}
}

func TestRetryStormOutput(t *testing.T) {
	r, err := RunRetryStorm(StormConfig{Duration: 5 * time.Second, IncidentStart: time.Second, IncidentEnd: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	names, ts, vals := r.Series()
	if want := []string{"immediate offered", "per-request offered", "portero offered", "capacity"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Series names = %v, want %v", names, want)
	}
	if len(ts) != 5 || len(vals) != 4 || len(vals[0]) != 5 || vals[3][1] != 10 || vals[3][0] != 200 {
		t.Errorf("Series t = %v, values = %v", ts, vals)
	}
	var buf bytes.Buffer
	if err := r.Table().Write(&buf, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(rows) != 6 || len(rows[0]) != 8 || rows[0][0] != "t_s" || rows[2][1] != "370" {
		t.Errorf("csv = %v, %v", rows, err)
	}
	buf.Reset()
	if err := r.Table().Write(&buf, "table"); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "immediate") || !strings.Contains(out, "× demand") || strings.Count(out, "\n") != 4+1+6 {
		t.Errorf("table output:\n%s", out)
	}
	if err := r.Table().Write(&buf, "xml"); err == nil {
		t.Error("Table().Write(xml) succeeded, want an error")
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []StormConfig{{Rate: -1}, {Duration: -time.Second}, {IncidentStart: 5 * time.Second, IncidentEnd: time.Second}, {Base: time.Second, Cap: time.Millisecond}, {Bucket: time.Nanosecond}} {
		if _, err := RunRetryStorm(c); err == nil {
			t.Errorf("RunRetryStorm(%+v) succeeded, want an error", c)
		}
	}
	for _, c := range []HerdConfig{{Clients: -1}, {Capacity: -1}, {Base: time.Second, Cap: time.Millisecond}, {Bucket: time.Nanosecond}} {
		if _, err := RunHerd(c); err == nil {
			t.Errorf("RunHerd(%+v) succeeded, want an error", c)
		}
	}
}

func TestHerdWaves(t *testing.T) {
	r, err := RunHerd(HerdConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	nj, fj := r.Variants[0], r.Variants[1]
	if nj.Name != "no-jitter" || fj.Name != "full-jitter" {
		t.Fatalf("variants %q, %q", nj.Name, fj.Name)
	}
	// Waits of 1, 2 and 4 s: all 200 come back at 1 s, 3 s and 7 s.
	if nj.Peak != 200 {
		t.Errorf("no-jitter peak = %v per 100 ms, want 200", nj.Peak)
	}
	if want := []time.Duration{time.Second, 3 * time.Second, 7 * time.Second}; !reflect.DeepEqual(nj.Waves, want) {
		t.Errorf("no-jitter waves at %v, want %v", nj.Waves, want)
	}
	for _, k := range []int{10, 30, 70} {
		if nj.Load[k] != 200 {
			t.Errorf("no-jitter load at %.1f s = %v, want 200", r.T[k], nj.Load[k])
		}
	}
	sum := func(xs []float64) (s float64) {
		for _, x := range xs {
			s += x
		}
		return s
	}
	if sum(nj.Load) != 600 || sum(fj.Load) != 600 {
		t.Errorf("retries = %v and %v, want 600 each (3 per client; jitter moves them, does not remove them)", sum(nj.Load), sum(fj.Load))
	}
	if len(fj.Waves) != 0 {
		t.Errorf("full-jitter waves at %v, want none", fj.Waves)
	}
}

func TestHerdJitterPeakMuchLower(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		r, err := RunHerd(HerdConfig{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if p := r.Variants[1].Peak; p > 60 || p < 10 {
			t.Errorf("seed %d: full-jitter peak %v per 100 ms, want in [10, 60] (no-jitter: 200)", seed, p)
		}
	}
}

func TestHerdCapacityServesMoreWithJitter(t *testing.T) {
	r, err := RunHerd(HerdConfig{Capacity: 50, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	nj, fj := r.Variants[0], r.Variants[1]
	// 5 per 100 ms: each wave of the herd gets 5 served.
	if nj.Served != 15 {
		t.Errorf("no-jitter served %d, want 15 (5 per wave, 3 waves)", nj.Served)
	}
	if fj.Served < 150 {
		t.Errorf("full-jitter served %d, want >= 150", fj.Served)
	}
	var buf bytes.Buffer
	if err := r.Table().Write(&buf, "csv"); err != nil {
		t.Fatal(err)
	}
	if rows, err := csv.NewReader(&buf).ReadAll(); err != nil || len(rows) != 101 || rows[11][0] != "1.0" || rows[11][1] != "200" {
		t.Errorf("csv rows = %d, %v; row for 1.0 s = %v", len(rows), err, rows[11])
	}
	names, ts, vals := r.Series()
	if len(names) != 4 || len(ts) != 100 || len(vals[0]) != 100 || names[3] != RetryAfterJitter {
		t.Errorf("Series = %v, %d times, %d values", names, len(ts), len(vals[0]))
	}
}

// TestHerdRetryAfterJitter: clients told "Retry-After: 1" on every refusal
// come back together at 1, 2 and 3 s when they wait exactly that; with package client's default jitter
// (up to 1 s after the server's time) they spread, and none comes back
// before the server's time.
func TestHerdRetryAfterJitter(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		r, err := RunHerd(HerdConfig{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		ra, raj := r.Variants[2], r.Variants[3]
		if ra.Name != RetryAfterExact || raj.Name != RetryAfterJitter {
			t.Fatalf("variants %q, %q", ra.Name, raj.Name)
		}
		if want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}; ra.Peak != 200 || !reflect.DeepEqual(ra.Waves, want) {
			t.Errorf("seed %d: retry-after peak %v, waves %v; want 200 and %v", seed, ra.Peak, ra.Waves, want)
		}
		if raj.Peak < 15 || raj.Peak > 45 || len(raj.Waves) != 0 {
			t.Errorf("seed %d: retry-after+jitter peak %v, waves %v; want in [15, 45] and none (retry-after: 200)", seed, raj.Peak, raj.Waves)
		}
		var n float64
		for k, l := range raj.Load {
			if l > 0 && r.T[k] < 1 {
				t.Errorf("seed %d: %v retries at %.1f s, before the server's Retry-After of 1 s", seed, l, r.T[k])
			}
			n += l
		}
		if n != 600 {
			t.Errorf("seed %d: retry-after+jitter made %v retries, want 600 (3 per client)", seed, n)
		}
	}
	r, err := RunHerd(HerdConfig{Seed: 1, RetryAfter: 2 * time.Second, RetryAfterJitter: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for k, l := range r.Variants[3].Load {
		if tt := r.T[k]; l > 0 && (tt < 2 || tt >= 2.5 && tt < 4 || tt >= 7.5) {
			t.Errorf("Retry-After 2 s + up to 0.5 s: %v retries at %.1f s, want only in [2, 2.5), [4, 5), [6, 7.5)", l, tt)
		}
	}
}

// TestDocFigures pins the figures docs/client.md quotes that the tests above
// only bound: the retry storm's request counts and amplification (seed 1,
// the default of `portero sim retry-storm`), and the clients served by the
// herd against a service of 50/s. Change the docs with them.
func TestDocFigures(t *testing.T) {
	r, err := RunRetryStorm(StormConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		s                         Strategy
		amp                       string
		succeeded, failed, unsent int
	}{
		{Immediate, "3.70", 3300, 2700, 0},
		{PerRequest, "3.52", 3520, 2480, 0},
		{Portero, "0.10", 4290, 0, 1710},
	} {
		got := summary(t, r, want.s)
		if amp := sim.Fixed(got.Amplification, 2); amp != want.amp || got.Succeeded != want.succeeded || got.Failed != want.failed || got.Unsent != want.unsent {
			t.Errorf("%s: %s× demand, ok/failed/unsent %d/%d/%d; want %s×, %d/%d/%d (docs/client.md)",
				want.s, amp, got.Succeeded, got.Failed, got.Unsent, want.amp, want.succeeded, want.failed, want.unsent)
		}
	}
	// docs/client.md: the portero row is the same without the jitter after
	// Retry-After.
	nj, err := RunRetryStorm(StormConfig{Seed: 1, RetryAfterJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := summary(t, r, Portero), summary(t, nj, Portero); a != b {
		t.Errorf("portero with the default jitter %+v, without %+v: want the same (docs/client.md)", a, b)
	}
	// docs/client.md: at 50/s full jitter serves 186 with the command's
	// default seed 1, 184 with seed 0 (HerdConfig's zero value); Retry-After
	// plus jitter 187 and 188; both exact variants 15.
	for _, tc := range []struct {
		seed       uint64
		served     [4]int
		jitterPeak float64 // retry-after+jitter, capacity 0
	}{{0, [4]int{15, 184, 15, 188}, 27}, {1, [4]int{15, 186, 15, 187}, 31}} {
		h, err := RunHerd(HerdConfig{Capacity: 50, Seed: tc.seed})
		if err != nil {
			t.Fatal(err)
		}
		var got [4]int
		for i, v := range h.Variants {
			got[i] = v.Served
		}
		if got != tc.served {
			t.Errorf("herd, capacity 50, seed %d: served %v (no-jitter, full-jitter, retry-after, retry-after+jitter), want %v (docs/client.md)", tc.seed, got, tc.served)
		}
		h, err = RunHerd(HerdConfig{Seed: tc.seed})
		if err != nil {
			t.Fatal(err)
		}
		if p := h.Variants[3].Peak; p != tc.jitterPeak {
			t.Errorf("herd, seed %d: retry-after+jitter peak %v per 100 ms, want %v (docs/client.md)", tc.seed, p, tc.jitterPeak)
		}
	}
}
