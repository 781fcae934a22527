package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/redistest"
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

// TestRLSEnvoyproxyHealthRedis: /healthcheck is 500 until Redis has
// answered once, then 200 "OK", and stays so when Redis goes away later
// (envoyproxy/ratelimit's default, REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
// unset: the failure policy answers meanwhile), under a failure policy
// that keeps /readyz waiting for Redis and under one that does not.
func TestRLSEnvoyproxyHealthRedis(t *testing.T) {
	for _, policy := range []portero.FailurePolicy{portero.FailError, portero.FailAllow} {
		t.Run(string(policy), func(t *testing.T) {
			srv := redistest.Start(t)
			srv.Kill()
			r := startRLS(t, server.RLSOptions{Store: "redis", RedisURL: srv.URL(), OnStoreError: policy,
				Envoyproxy: server.EnvoyproxyOptions{Compat: &rls.Compat{Headers: rls.HeadersNone}, Counting: engine.CountEach}})
			if code, b := getEP(t, r.http+"/healthcheck"); code != 500 || b != "" {
				t.Errorf("/healthcheck before Redis answered = %d %q, want 500 and nothing", code, b)
			}
			srv.Restart()
			deadline := time.Now().Add(20 * time.Second)
			for {
				code, b := getEP(t, r.http+"/healthcheck")
				if code == 200 && b == "OK" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/healthcheck after Redis started = %d %q, want 200 OK", code, b)
				}
				time.Sleep(20 * time.Millisecond)
			}
			srv.Kill()
			if code, b := getEP(t, r.http+"/healthcheck"); code != 200 || b != "OK" {
				t.Errorf("/healthcheck once Redis went away = %d %q, want 200 OK", code, b)
			}
		})
	}
}

// TestRLSEnvoyproxyDotFiles: under compatibility RunRLS reads dot files of
// the directory, as envoyproxy/ratelimit's runtime loader does, unless
// IgnoreDotFiles (its RUNTIME_IGNOREDOTFILES).
func TestRLSEnvoyproxyDotFiles(t *testing.T) {
	dir := t.TempDir()
	for name, dom := range map[string]string{"edge.yaml": "edge", ".hidden.yaml": "hidden"} {
		body := "domain: " + dom + "\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	line := func(dom string) string {
		return dom + ".ip: unit=HOUR requests_per_unit=1, shadow_mode: false, quota_mode: false\n"
	}
	for _, c := range []struct {
		ignore bool
		want   string
	}{{false, line("edge") + line("hidden")}, {true, line("edge")}} {
		r := startRLS(t, server.RLSOptions{ConfigPath: dir, Envoyproxy: server.EnvoyproxyOptions{
			Compat: &rls.Compat{Headers: rls.HeadersNone}, Counting: engine.CountEach, IgnoreDotFiles: c.ignore}})
		if code, b := getEP(t, r.admin+"/rlconfig"); code != 200 || b != c.want {
			t.Errorf("IgnoreDotFiles %v: /rlconfig = %d %q, want %q", c.ignore, code, b, c.want)
		}
	}
}

// TestRLSEnvoyproxyOptions: each of EnvoyproxyOptions reaches what it
// sets, through RunRLS, on a real redis-server (the scenarios of
// internal/rls build the service by hand): KeyPrefix names the Redis keys,
// StopIncrementWhenOver leaves a counter alone when another goes over,
// QuotaMode makes every limit a quota one, CounterJitter lengthens expiries,
// Compat.Metadata fills dynamic_metadata and EnvoyproxyOptions.ShadowMode answers OK.
func TestRLSEnvoyproxyOptions(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	const file = "domain: o\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n    metadata: {tier: gold}\n" +
		"  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	if err := os.WriteFile(filepath.Join(dir, "o.yaml"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_772_445_605, 250_000_000) // window 1772445600
	start := func(ep server.EnvoyproxyOptions) func(body string) (int, map[string]any) {
		ep.Counting = engine.CountEach
		r := startRLS(t, server.RLSOptions{ConfigPath: dir, Store: "redis", RedisURL: srv.URL(), Envoyproxy: ep,
			Now: func() time.Time { return at }})
		return func(body string) (int, map[string]any) {
			t.Helper()
			resp, err := http.Post(r.http+"/json", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var m map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode, m
		}
	}
	redis := func(args ...string) string {
		t.Helper()
		v, err := redistest.Do(srv.Addr(), args...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	both := func(v string) string {
		return `{"domain": "o", "descriptors": [{"entries": [{"key": "a", "value": "` + v + `"}]}, {"entries": [{"key": "b", "value": "` + v + `"}]}]}`
	}
	post := start(server.EnvoyproxyOptions{KeyPrefix: "pfx:", StopIncrementWhenOver: true, QuotaMode: true, CounterJitter: 300 * time.Second,
		Compat: &rls.Compat{Headers: rls.HeadersNone, Metadata: true}})
	if code, m := post(both("x")); code != 200 || fmt.Sprint(m["dynamicMetadata"].(map[string]any)["metadata"]) != "map[tier:gold]" {
		t.Errorf("first call: %d %v, want 200 with the passed descriptor's metadata", code, m)
	}
	// a goes over: under QuotaMode one quota descriptor over does not refuse.
	if code, m := post(both("x")); code != 200 || m["overallCode"] != "OK" {
		t.Errorf("a over under QuotaMode: %d %v, want 200 OK", code, m)
	}
	// StopIncrementWhenOver: b was not counted when a went over; KeyPrefix
	// starts both keys.
	if a, b := redis("GET", "pfx:o_a_x_1772445600"), redis("GET", "pfx:o_b_x_1772445600"); a != "2" || b != "1" {
		t.Errorf("counters a=%q b=%q, want 2 and 1", a, b)
	}
	if code, m := post(`{"domain": "o", "descriptors": [{"entries": [{"key": "a", "value": "x"}]}]}`); code != 429 {
		t.Errorf("its only quota descriptor over: %d %v, want 429", code, m)
	}
	longer := 0
	for i := 0; i < 10; i++ {
		v := "j" + strconv.Itoa(i)
		post(both(v))
		if ttl, err := strconv.Atoi(redis("TTL", "pfx:o_b_"+v+"_1772445600")); err != nil || ttl > 360 || ttl < 59 {
			t.Errorf("TTL of %s: %d (%v), want 59 to 360 s", v, ttl, err)
		} else if ttl > 60 {
			longer++
		}
	}
	if longer < 5 {
		t.Errorf("%d of 10 counters live longer than their minute, want most (CounterJitter 300 s)", longer)
	}

	shadow := start(server.EnvoyproxyOptions{Compat: &rls.Compat{Headers: rls.HeadersNone}, ShadowMode: true})
	shadow(both("s"))
	if code, m := shadow(both("s")); code != 200 || m["overallCode"] != "OK" || m["statuses"].([]any)[0].(map[string]any)["code"] != "OVER_LIMIT" {
		t.Errorf("ShadowMode: %d %v, want 200 OK with a's status OVER_LIMIT", code, m)
	}
	if _, m := shadow(both("s")); m["dynamicMetadata"] != nil {
		t.Errorf("dynamic_metadata without Metadata: %v", m["dynamicMetadata"])
	}
}

// grpcHealthOf asks the gRPC health of service.
func grpcHealthOf(t *testing.T, addr, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(addr, "grpc://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health of %q: %v", service, err)
	}
	return resp.GetStatus()
}

// TestRLSEnvoyproxyGRPCHealthWithConfig: with HealthyWithConfig
// (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED) and no configuration with a
// domain, the gRPC health of "ratelimit" (and of the service's own name)
// is NOT_SERVING, as envoyproxy/ratelimit's, "" SERVING; once a
// configuration with a domain loads, SERVING. Without the setting,
// SERVING throughout. On both transports.
func TestRLSEnvoyproxyGRPCHealthWithConfig(t *testing.T) {
	for _, transport := range []rls.Transport{rls.TransportGRPC, rls.TransportLean} {
		for _, with := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/%v", transport, with), func(t *testing.T) {
				dir := t.TempDir()
				reload := make(chan struct{}, 1)
				r := startRLS(t, server.RLSOptions{ConfigPath: dir, Reload: reload, GRPC: rls.ServerOptions{Transport: transport},
					Envoyproxy: server.EnvoyproxyOptions{Compat: &rls.Compat{}, Counting: engine.CountEach, HealthyWithConfig: with}})
				want := healthpb.HealthCheckResponse_SERVING
				if with {
					want = healthpb.HealthCheckResponse_NOT_SERVING
				}
				for _, svc := range []string{rls.HealthName, rls.ServiceName} {
					if got := grpcHealthOf(t, r.grpc, svc); got != want {
						t.Errorf("no configuration: health of %q = %v, want %v", svc, got, want)
					}
				}
				if got := grpcHealthOf(t, r.grpc, ""); got != healthpb.HealthCheckResponse_SERVING {
					t.Errorf(`no configuration: health of "" = %v, want SERVING`, got)
				}
				conf := "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
				if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(conf), 0o644); err != nil {
					t.Fatal(err)
				}
				reload <- struct{}{}
				deadline := time.Now().Add(10 * time.Second)
				for grpcHealthOf(t, r.grpc, rls.HealthName) != healthpb.HealthCheckResponse_SERVING && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if got := grpcHealthOf(t, r.grpc, rls.HealthName); got != healthpb.HealthCheckResponse_SERVING {
					t.Errorf("with a domain: health of ratelimit = %v, want SERVING", got)
				}
			})
		}
	}
}

// TestRLSEnvoyproxyDebugIndex: in compatibility mode the admin listener
// (its debug port) answers / and any path it has no endpoint for with
// envoyproxy/ratelimit's index of endpoints, 200; Portero's own mode
// sends / to the dashboard.
func TestRLSEnvoyproxyDebugIndex(t *testing.T) {
	r := startRLS(t, server.RLSOptions{GRPCListen: "off", Envoyproxy: server.EnvoyproxyOptions{Compat: &rls.Compat{}, Counting: engine.CountEach}})
	for _, path := range []string{"/", "/nothing-here"} {
		code, body := getEP(t, r.admin+path)
		for _, line := range []string{"/debug/pprof/: root of various pprof endpoints. hit for help.\n", "/debug/pprof/profile: CPU profiling endpoint\n",
			"/debug/pprof/trace: trace endpoint\n", "/rlconfig: print out the currently loaded configuration for debugging\n", "/stats: print out stats\n"} {
			if code != 200 || !strings.Contains(body, line) {
				t.Errorf("GET %s = %d %q, want 200 with %q", path, code, body, line)
			}
		}
	}
	own := startRLS(t, server.RLSOptions{GRPCListen: "off"})
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(own.admin + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/dashboard/" {
		t.Errorf("Portero's own mode: GET / = %d %s, want 302 to /dashboard/", resp.StatusCode, resp.Header.Get("Location"))
	}
}
