package server_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/server"
)

// TestAlertMetricsExist: every portero_* metric the example alerting rules
// name (examples/alerts) is exported by a running server, once it has
// decided a request of each kind; and the quota histogram observes the
// share of a quota used without a client label.
func TestAlertMetricsExist(t *testing.T) {
	rules, err := os.ReadFile("../../examples/alerts/portero.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, path, "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules: [{name: daily, key: ip, limit: 10/day}]\n")
	r := start(t, server.Options{ConfigPath: path})
	for range 9 {
		get(t, r.gateway+"/")
	}
	_, _, metrics := get(t, r.admin+"/metrics")
	// A second server whose Redis never answers: the failure policy decides.
	down := filepath.Join(t.TempDir(), "down.yaml")
	writeFile(t, down, "store: {type: redis, url: \"redis://127.0.0.1:1/0\", timeout: 20ms}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules: [{name: r, key: ip, limit: 10/s}]\n")
	rd := start(t, server.Options{ConfigPath: down})
	get(t, rd.gateway+"/")
	_, _, downMetrics := get(t, rd.admin+"/metrics")
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(portero_[a-z_]+)`).FindAllStringSubmatch(metrics+downMetrics, -1) {
		seen[m[1]] = true
	}
	for _, name := range regexp.MustCompile(`portero_[a-z_]+`).FindAllString(string(rules), -1) {
		if !seen[name] && !seen[name+"_count"] {
			t.Errorf("the alerting rules use %s, which the server does not export", name)
		}
	}
	// Nine of ten used: the 9th decision saw 0.9 used, so 8 observations
	// are at or below 0.8 and 1 above it.
	for _, want := range []string{
		`portero_quota_used_ratio_bucket{rule="daily",le="0.8"} 8`,
		`portero_quota_used_ratio_bucket{rule="daily",le="0.9"} 9`,
		`portero_quota_used_ratio_count{rule="daily"} 9`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
