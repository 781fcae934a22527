package server_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/server"
)

// TestServeLeasedBudget: portero serve serves a rule with a budget from
// leased budgets with no code of the gateway's own: 30 requests of a
// global 100 per minute are admitted with the exact RateLimit, in fewer
// store calls than requests, and the admin's metrics count the batches.
func TestServeLeasedBudget(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "portero.yaml")
	yaml := `upstreams: {d: {type: demo}}
routes: [{upstream: d}]
rules:
  - {name: api, key: global, algorithm: fixed-window, limit: 100/min, budget: 50ms}
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 4, 1, 10, 0, 10, 0, time.UTC)
	r := start(t, server.Options{ConfigPath: path, Now: func() time.Time { return t0 }})
	for i := 1; i <= 30; i++ {
		code, h, _ := get(t, r.gateway+"/")
		if want := fmt.Sprintf(`"api";r=%d;t=50`, 100-i); code != 200 || h.Get("RateLimit") != want {
			t.Fatalf("request %d: %d RateLimit %q, want 200 %q", i, code, h.Get("RateLimit"), want)
		}
	}
	takes := metricValue(t, r.admin, "", "portero_budget_takes_total")
	calls := metricValue(t, r.admin, "", "portero_budget_store_calls_total")
	if hits := metricValue(t, r.admin, "", "portero_budget_hits_total"); takes == 0 || calls >= 15 || hits != 30 {
		t.Errorf("metrics: %v takes, %v store calls, %v hits; want batches, at most a call per two hits, 30 hits", takes, calls, hits)
	}
}

// TestRLSLeasedBudget: portero rls serves an Envoy limit with
// portero.budget from leased budgets: /v1/check admits 30 requests of 100
// per minute in fewer store calls than requests, counted in the metrics.
func TestRLSLeasedBudget(t *testing.T) {
	dir := t.TempDir()
	conf := `domain: edge
descriptors:
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 100, portero: {budget: 50ms}}
`
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRLS(t, server.RLSOptions{ConfigPath: dir})
	for i := 1; i <= 30; i++ {
		resp, err := http.Post(r.http+"/v1/check", "application/json", strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"api","value":"x"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"allowed":true`) {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	takes := metricValue(t, r.admin, "", "portero_budget_takes_total")
	calls := metricValue(t, r.admin, "", "portero_budget_store_calls_total")
	if hits := metricValue(t, r.admin, "", "portero_budget_hits_total"); takes == 0 || calls >= 15 || hits != 30 {
		t.Errorf("metrics: %v takes, %v store calls, %v hits; want batches, at most a call per two hits, 30 hits", takes, calls, hits)
	}
}
