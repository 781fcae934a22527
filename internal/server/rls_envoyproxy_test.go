package server_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/internal/server"
)

func getEP(t *testing.T, url string) (int, string) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// TestRLSEnvoyproxy: RunRLS with RLSOptions.Envoyproxy serves
// envoyproxy/ratelimit's /json and /healthcheck on the HTTP listener and
// /rlconfig on the admin listener (its debug port), starts when the
// configuration does not load (answering that none is loaded, /healthcheck
// failing under HealthyWithConfig), and takes the configuration once it is
// fixed.
func TestRLSEnvoyproxy(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	good := "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	if err := os.WriteFile(file, []byte(strings.Replace(good, "hour", "fortnight", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	reload := make(chan struct{}, 1)
	r := startRLS(t, server.RLSOptions{ConfigPath: dir, Reload: reload, Envoyproxy: server.EnvoyproxyOptions{
		Compat: &rls.Compat{Headers: rls.HeadersNone}, Counting: engine.CountEach, HealthyWithConfig: true}})
	body := `{"domain": "edge", "descriptors": [{"entries": [{"key": "ip", "value": "1"}]}]}`
	post := func() (int, string) {
		resp, err := http.Post(r.http+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := post(); code != 400 || b != "Bad Request\n" {
		t.Errorf("/json with no configuration = %d %q, want 400", code, b)
	}
	if code, _ := getEP(t, r.http+"/healthcheck"); code != 500 {
		t.Errorf("/healthcheck with no configuration and HealthyWithConfig = %d, want 500", code)
	}
	if code, b := getEP(t, r.admin+"/rlconfig"); code != 200 || b != "" {
		t.Errorf("/rlconfig with no configuration = %d %q, want 200 and nothing", code, b)
	}
	if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := getEP(t, r.http+"/healthcheck"); code == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, b := getEP(t, r.http+"/healthcheck"); code != 200 || b != "OK" {
		t.Errorf("/healthcheck = %d %q, want 200 OK", code, b)
	}
	for i, want := range []int{200, 429} {
		if code, b := post(); code != want {
			t.Errorf("/json call %d = %d %s, want %d", i, code, b, want)
		}
	}
	if code, b := getEP(t, r.admin+"/rlconfig"); code != 200 || b != "edge.ip: unit=HOUR requests_per_unit=1, shadow_mode: false, quota_mode: false\n" {
		t.Errorf("/rlconfig = %d %q", code, b)
	}
}
