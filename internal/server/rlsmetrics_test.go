package server_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/rlsclient"
	"github.com/portero-rl/portero/internal/server"
)

// metricsConfig: a plain key (10 a minute), a detailed_metric key, a
// shadow limit, and a limit of 5 for the near-limit ratio.
const metricsConfig = `domain: m
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /x
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: five
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// scrape returns the admin listener's metrics.
func scrape(t *testing.T, admin string) string {
	t.Helper()
	_, _, body := get(t, admin+"/metrics")
	return body
}

var sampleRE = regexp.MustCompile(`(?m)^(\w+)(?:\{([^}]*)\})? (\S+)$`)

// samples returns the values of metric name whose labels include every
// one of want (label="value" strings), by their whole label text.
func samples(body, name string, want ...string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range sampleRE.FindAllStringSubmatch(body, -1) {
		if m[1] != name {
			continue
		}
		ok := true
		for _, w := range want {
			if !strings.Contains(m[2], w) {
				ok = false
			}
		}
		if ok {
			v, _ := strconv.ParseFloat(m[3], 64)
			out[m[2]] = v
		}
	}
	return out
}

func value(t *testing.T, body, name string, labels ...string) float64 {
	t.Helper()
	s := samples(body, name, labels...)
	if len(s) != 1 {
		t.Errorf("%s%v: %d series, want 1: %v", name, labels, len(s), s)
		return -1
	}
	for _, v := range s {
		return v
	}
	return -1
}

func ask(t *testing.T, c *rlsclient.Client, req *descriptor.Request) *rlsclient.Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%+v): %v", req, err)
	}
	return a
}

func one(key, value string) descriptor.Descriptor {
	return descriptor.Descriptor{Entries: []descriptor.Entry{{Key: key, Value: value}}}
}

// TestRLSMetrics: portero rls counts every descriptor decision by domain,
// descriptor key and the engine's outcome, from the engine's verdicts, on
// gRPC and on /v1/check alike: allowed, near-limit (at the configured
// ratio), refused and not-counted (all-or-nothing), shadow-refused,
// check-only, can-never-pass; calls by door and result. A thousand
// distinct client values make no new series; a detailed_metric
// descriptor's values do, up to the cap, and the rest are counted under
// the plain key.
func TestRLSMetrics(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.yaml")
	writeFile(t, path, metricsConfig)
	r := startRLS(t, server.RLSOptions{ConfigPath: path, NearLimit: 0.6, MaxDetailedSeries: 3})
	c, err := rlsclient.Dial(strings.TrimPrefix(r.grpc, "grpc://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// 1000 distinct addresses, one call each: 1000 allowed decisions under
	// one key.
	for i := 0; i < 1000; i++ {
		ask(t, c, &descriptor.Request{Domain: "m", Descriptors: []descriptor.Descriptor{one("remote_address", fmt.Sprintf("10.0.%d.%d", i/256, i%256))}})
	}
	// "five": 5 a minute at a near-limit ratio of 0.6: calls 1-2 allowed
	// (1/5, 2/5 used), 3-5 near-limit (3/5 ≥ 0.6), the 6th refused.
	for i := 0; i < 6; i++ {
		ask(t, c, &descriptor.Request{Domain: "m", Descriptors: []descriptor.Descriptor{one("five", "a")}})
	}
	// All-or-nothing: five/a refuses, remote_address 10.9.9.9 is not
	// counted.
	if a := ask(t, c, &descriptor.Request{Domain: "m", Descriptors: []descriptor.Descriptor{one("remote_address", "10.9.9.9"), one("five", "a")}}); a.Code != descriptor.OverLimit {
		t.Fatalf("refused pair: %v", a.Code)
	}
	// Shadow: the second /x call would be refused, and passes.
	for i := 0; i < 2; i++ {
		if a := ask(t, c, &descriptor.Request{Domain: "m", Descriptors: []descriptor.Descriptor{one("path", "/x")}}); a.Code != descriptor.OK {
			t.Fatalf("shadow call %d: %v", i, a.Code)
		}
	}
	// Check-only (hits_addend 0) and a cost that can never pass (20 > 10).
	zero := uint64(0)
	check := one("remote_address", "10.8.8.8")
	check.Hits = &zero
	ask(t, c, &descriptor.Request{Domain: "m", Descriptors: []descriptor.Descriptor{check}})
	ask(t, c, &descriptor.Request{Domain: "m", Hits: 20, Descriptors: []descriptor.Descriptor{one("remote_address", "10.7.7.7")}})
	// detailed_metric: five users, a cap of three detailed keys.
	for i := 0; i < 5; i++ {
		ask(t, c, &descriptor.Request{Domain: "m", Descriptors: []descriptor.Descriptor{one("user", fmt.Sprintf("u%d", i))}})
	}
	// Errors: an unknown domain, a descriptor without entries.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ShouldRateLimit(ctx, &descriptor.Request{Domain: "nope", Descriptors: []descriptor.Descriptor{one("a", "b")}}); err == nil {
		t.Fatal("unknown domain answered")
	}
	if _, err := c.ShouldRateLimit(ctx, &descriptor.Request{Domain: "m", Descriptors: []descriptor.Descriptor{{}}}); err == nil {
		t.Fatal("empty descriptor answered")
	}
	// The HTTP door counts into the same series.
	resp, err := http.Post(r.http+"/v1/check", "application/json", strings.NewReader(`{"domain":"m","descriptors":[{"entries":[{"key":"remote_address","value":"10.6.6.6"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	m := scrape(t, r.admin)
	dec := "portero_rls_decisions_total"
	ra := `key="remote_address"`
	for _, tt := range []struct {
		labels []string
		want   float64
	}{
		{[]string{ra, `outcome="allowed"`}, 1000 + 1}, // + the HTTP call
		{[]string{ra, `outcome="not-counted"`}, 1},    // the refused pair
		{[]string{ra, `outcome="check-only"`}, 1},     // hits_addend 0
		{[]string{ra, `outcome="can-never-pass"`}, 1}, // cost 20 > 10
		{[]string{`key="five"`, `outcome="allowed"`}, 2},
		{[]string{`key="five"`, `outcome="near-limit"`}, 3},
		{[]string{`key="five"`, `outcome="refused"`}, 1 + 1}, // the 6th and the pair
		// Limits of 1: the first call uses all of it, near-limit.
		{[]string{`key="path_/x"`, `outcome="near-limit"`}, 1},
		{[]string{`key="path_/x"`, `outcome="shadow-refused"`}, 1},
		{[]string{`key="user_u0"`, `outcome="near-limit"`}, 1},
		{[]string{`key="user_u2"`, `outcome="near-limit"`}, 1},
		{[]string{`key="user"`, `outcome="near-limit"`}, 2}, // u3, u4: past the cap
	} {
		if got := value(t, m, dec, append([]string{`domain="m"`}, tt.labels...)...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", dec, tt.labels, got, tt.want)
		}
	}
	if n := len(samples(m, dec, ra)); n != 7 {
		t.Errorf("remote_address has %d series, want one per outcome (7), whatever the addresses", n)
	}
	if strings.Contains(m, "10.0.") || strings.Contains(m, "u3") || strings.Contains(m, "u4") {
		t.Error("a request value that is not detailed (or past the cap) is a label")
	}
	if got := value(t, m, "portero_rls_detailed_dropped_total"); got != 2 {
		t.Errorf("dropped detailed = %v, want 2", got)
	}
	for labels, want := range map[string]float64{
		// ok: the addresses, five's first 5, the 2 shadow calls, the
		// check-only one, the 5 users; over_limit: five's 6th, the pair,
		// cost 20.
		`door="grpc",result="ok"`: 1000 + 5 + 2 + 1 + 5, `door="grpc",result="over_limit"`: 1 + 1 + 1,
		`door="grpc",result="not_found"`: 1, `door="grpc",result="invalid"`: 1, `door="http",result="ok"`: 1,
	} {
		if got := value(t, m, "portero_rls_calls_total", labels); got != want {
			t.Errorf("portero_rls_calls_total{%s} = %v, want %v", labels, got, want)
		}
	}
	if got := value(t, m, "portero_store_latency_seconds_count"); got < 1000 {
		t.Errorf("store latency observed %v times", got)
	}
	for _, g := range []string{"portero_store_fallback 0", "portero_store_connected 1", "portero_store_errors_total 0", "portero_rls_config_domains 1"} {
		if !strings.Contains(m, "\n"+g+"\n") {
			t.Errorf("metrics lack %q", g)
		}
	}
}

// TestRLSMetricsStoreDown: with a Redis that does not answer, the failure
// policy's decisions are counted by policy, the store errors and the
// fallback and connected gauges say so; under error the calls are
// counted unavailable.
func TestRLSMetricsStoreDown(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.yaml")
	writeFile(t, path, metricsConfig)
	for _, policy := range []portero.FailurePolicy{portero.FailAllow, portero.FailError} {
		t.Run(string(policy), func(t *testing.T) {
			r := startRLS(t, server.RLSOptions{ConfigPath: path, Store: "redis", RedisURL: "redis://127.0.0.1:1", OnStoreError: policy,
				CallTimeout: 200 * time.Millisecond})
			c, err := rlsclient.Dial(strings.TrimPrefix(r.grpc, "grpc://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := 0; i < 3; i++ {
				_, err := c.ShouldRateLimit(ctx, &descriptor.Request{Domain: "m", Descriptors: []descriptor.Descriptor{one("remote_address", "10.1.1.1")}})
				if (err == nil) != (policy == portero.FailAllow) {
					t.Fatalf("call %d under %s: %v", i, policy, err)
				}
			}
			m := scrape(t, r.admin)
			if got := value(t, m, "portero_store_errors_total"); got != 3 {
				t.Errorf("store errors = %v, want 3", got)
			}
			if !strings.Contains(m, "\nportero_store_connected 0\n") {
				t.Error("portero_store_connected is not 0")
			}
			// The Redis store is behind leased budgets: its node gauge still
			// reads it.
			if !strings.Contains(m, "\nportero_store_node_unavailable") {
				t.Error("metrics lack portero_store_node_unavailable")
			}
			if policy == portero.FailAllow {
				if got := value(t, m, "portero_rls_failure_policy_decisions_total", `domain="m"`, `key="remote_address"`, `policy="allow"`); got != 3 {
					t.Errorf("failure-policy decisions = %v, want 3", got)
				}
				if !strings.Contains(m, "\nportero_store_fallback 1\n") {
					t.Error("portero_store_fallback is not 1")
				}
			} else if got := value(t, m, "portero_rls_calls_total", `door="grpc"`, `result="unavailable"`); got != 3 {
				t.Errorf("unavailable calls = %v, want 3", got)
			}
		})
	}
}
