package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/checkapi"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/internal/rlsclient"
	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/internal/tlsreload"
	"github.com/portero-rl/portero/internal/tlstest"
)

type runningRLS struct {
	grpc, http, admin string // URLs as printed
	logs              *testenv.Buffer
	done              chan error
	cancel            context.CancelFunc
}

var rlsAddrRE = regexp.MustCompile(`portero rls: (gRPC|HTTP|admin) listening on (\S+)`)

// startRLS runs server.RunRLS on free loopback ports (the listeners o
// does not turn off) and waits for the printed addresses.
func startRLS(t *testing.T, o server.RLSOptions) *runningRLS {
	t.Helper()
	out, logs := &testenv.Buffer{}, &testenv.Buffer{}
	o.Stdout = out
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if o.ConfigPath == "" {
		o.ConfigPath = "../../examples/envoy/config"
	}
	want := 0
	for _, a := range []*string{&o.GRPCListen, &o.HTTPListen, &o.AdminListen} {
		if *a == "" {
			*a = "127.0.0.1:0"
		}
		if *a != "off" {
			want++
		}
	}
	// The drain is skipped at stop unless the test asks for one.
	if o.DrainPeriod == nil {
		zero := time.Duration(0)
		o.DrainPeriod = &zero
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningRLS{logs: logs, done: make(chan error, 1), cancel: cancel}
	go func() { r.done <- server.RunRLS(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			t.Error("RunRLS did not return after cancel")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ms := rlsAddrRE.FindAllStringSubmatch(out.String(), -1)
		if len(ms) == want {
			for _, m := range ms {
				switch m[1] {
				case "gRPC":
					r.grpc = m[2]
				case "HTTP":
					r.http = m[2]
				case "admin":
					r.admin = m[2]
				}
			}
			return r
		}
		select {
		case err := <-r.done:
			t.Fatalf("RunRLS returned early: %v\nlogs:\n%s", err, logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no addresses printed:\n%s\n%s", out, logs)
	return nil
}

// stop cancels RunRLS and returns its result.
func (r *runningRLS) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("RunRLS did not return after cancel")
		return nil
	}
}

func grpcHealth(t *testing.T, url string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(url, "grpc://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

func check(t *testing.T, httpURL string) int {
	t.Helper()
	resp, err := http.Post(httpURL+"/v1/check", "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.9.9.9"}]}]}`))
	if err != nil {
		t.Fatalf("/v1/check: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestRLSServes: portero rls runs on the shared lifecycle, with either
// gRPC transport: its three listeners print their URLs; /readyz and
// /healthz answer on the HTTP and the admin listener, gRPC health says
// SERVING; the admin listener serves what serve's does (metrics with the
// build info, /api/version, pprof behind the token) and /config; a reload
// is counted by result.
func TestRLSServes(t *testing.T) {
	for _, transport := range []string{"lean", "grpc-go"} {
		t.Run(transport, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "limits.yaml")
			writeFile(t, path, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
			reload := make(chan struct{})
			r := startRLS(t, server.RLSOptions{ConfigPath: path, GRPC: rls.ServerOptions{Transport: rls.Transport(transport)}, AdminToken: "s3cret", Reload: reload})
			if !strings.HasPrefix(r.grpc, "grpc://") || !strings.HasPrefix(r.http, "http://") || !strings.HasPrefix(r.admin, "http://") {
				t.Fatalf("URLs %q %q %q", r.grpc, r.http, r.admin)
			}
			auth := []string{"Authorization", "Bearer s3cret"}
			for _, u := range []string{r.http, r.admin} {
				for _, p := range []string{"/readyz", "/healthz"} {
					if code, _, body := get(t, u+p); code != 200 {
						t.Errorf("%s%s = %d %q", u, p, code, body)
					}
				}
			}
			if st, err := grpcHealth(t, r.grpc); err != nil || st != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("gRPC health = %v, %v", st, err)
			}
			if code := check(t, r.http); code != 200 {
				t.Errorf("/v1/check = %d", code)
			}
			checkAdminCommon(t, r.admin, r.http, auth)
			if code, _, body := get(t, r.admin+"/config", auth...); code != 200 || !strings.Contains(body, `"edge"`) || !strings.Contains(body, path) {
				t.Errorf("/config = %d %s", code, body)
			}

			defer func() {
				if t.Failed() {
					t.Logf("logs:\n%s", r.logs)
				}
			}()
			counted := func(result string) func() bool {
				return func() bool {
					_, _, m := get(t, r.admin+"/metrics", auth...)
					return strings.Contains(m, `portero_config_reloads_total{result="`+result+`"} 1`)
				}
			}
			writeFile(t, path, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight}\n")
			reload <- struct{}{}
			waitFor(t, "the refused reload counted", counted("error"))
			writeFile(t, path, "domain: edge2\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
			reload <- struct{}{}
			waitFor(t, "the reload counted", counted("ok"))
			if code, _, body := get(t, r.admin+"/config", auth...); !strings.Contains(body, `"edge2"`) {
				t.Errorf("/config after the reload = %d %s", code, body)
			}
			if err := r.stop(t); err != nil {
				t.Errorf("RunRLS = %v", err)
			}
		})
	}
}

// TestRLSDrain: on stop, after a probe asked /readyz, portero rls drains
// as serve does: /readyz answers 503 on both HTTP listeners and gRPC
// health NOT_SERVING, while decisions are still answered on HTTP and gRPC;
// a second signal (Hurry) ends the drain and it returns nil.
func TestRLSDrain(t *testing.T) {
	for _, transport := range []string{"lean", "grpc-go"} {
		t.Run(transport, func(t *testing.T) {
			hurry := make(chan struct{})
			drain := time.Minute
			r := startRLS(t, server.RLSOptions{GRPC: rls.ServerOptions{Transport: rls.Transport(transport)}, DrainPeriod: &drain, Hurry: hurry})
			if code, _, _ := get(t, r.http+"/readyz"); code != 200 {
				t.Fatalf("/readyz before the stop = %d", code)
			}
			r.cancel()
			waitFor(t, "/readyz 503", func() bool { code, _, _ := get(t, r.http+"/readyz"); return code == 503 })
			if code, _, body := get(t, r.admin+"/readyz"); code != 503 || !strings.Contains(body, "shutting down") {
				t.Errorf("admin /readyz while draining = %d %q", code, body)
			}
			if st, err := grpcHealth(t, r.grpc); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Errorf("gRPC health while draining = %v, %v; want NOT_SERVING", st, err)
			}
			if code := check(t, r.http); code != 200 {
				t.Errorf("/v1/check while draining = %d, want still answered", code)
			}
			select {
			case err := <-r.done:
				t.Fatalf("RunRLS returned during the drain: %v", err)
			default:
			}
			close(hurry)
			select {
			case err := <-r.done:
				r.done <- err
				if err != nil {
					t.Errorf("RunRLS = %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("RunRLS did not return after the drain was cut short")
			}
		})
	}
}

// TestRLSTLS: TLS on the HTTP listener, with its certificate rotated on
// disk and served at the next connection without a restart; the admin
// listener with a client CA refuses a client without a certificate and
// admits one the CA signed.
func TestRLSTLS(t *testing.T) {
	dir := t.TempDir()
	ca, clients := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "client CA")
	first := ca.Server(t)
	httpCert, httpKey := first.Write(t, dir, "http")
	adCert, adKey := ca.Server(t).Write(t, dir, "admin")
	clientCA := clients.WriteCA(t, dir, "clients")
	r := startRLS(t, server.RLSOptions{GRPCListen: "off",
		HTTPTLS:  tlsFiles(httpCert, httpKey, ""),
		AdminTLS: tlsFiles(adCert, adKey, clientCA)})
	if !strings.HasPrefix(r.http, "https://") || !strings.HasPrefix(r.admin, "https://") {
		t.Fatalf("URLs %s %s, want https", r.http, r.admin)
	}
	if code, _, serial, err := tlsGet(r.http+"/healthz", ca, nil); err != nil || code != 200 || serial != first.Serial.String() {
		t.Fatalf("HTTP over TLS: %d %v serial %s", code, err, serial)
	}
	second := ca.Server(t)
	second.Write(t, dir, "http")
	if code, _, serial, err := tlsGet(r.http+"/healthz", ca, nil); err != nil || code != 200 || serial != second.Serial.String() {
		t.Fatalf("after the rotation: %d %v serial %s, want %s", code, err, serial, second.Serial)
	}
	if _, _, _, err := tlsGet(r.admin+"/metrics", ca, nil); err == nil {
		t.Error("the admin listener admitted a client without a certificate")
	}
	cert := clients.Client(t, "prometheus").TLS(t)
	if code, body, _, err := tlsGet(r.admin+"/metrics", ca, &cert); err != nil || code != 200 || !strings.Contains(body, "portero_build_info") {
		t.Errorf("admin with a certificate the CA signed: %d %v", code, err)
	}
}

// TestRLSReadiness: a Redis store that has not answered (nothing listens
// at its address) makes /readyz 503 under the failure policies that can
// only refuse (deny) or fail (error) every call; under allow the instance
// serves and is ready.
func TestRLSReadiness(t *testing.T) {
	for _, tt := range []struct {
		policy portero.FailurePolicy
		code   int
	}{{portero.FailDeny, 503}, {portero.FailError, 503}, {portero.FailAllow, 200}} {
		t.Run(string(tt.policy), func(t *testing.T) {
			r := startRLS(t, server.RLSOptions{GRPCListen: "off", AdminListen: "off", Store: "redis", RedisURL: "redis://127.0.0.1:1",
				OnStoreError: tt.policy})
			if code, _, body := get(t, r.http+"/readyz"); code != tt.code {
				t.Errorf("/readyz = %d %q, want %d", code, body, tt.code)
			}
		})
	}
}

// TestRLSStartWithRedisDown is, for `portero rls`, what
// TestStartWithRedisDown is for serve: with a real redis-server's address
// and nothing answering there, rls starts (the store dials in the
// background), says so in its log, answers gRPC and /v1/check by
// --on-store-error (and is not ready only under deny), and counts in Redis
// by itself once Redis answers.
func TestRLSStartWithRedisDown(t *testing.T) {
	for _, tt := range []struct {
		policy  portero.FailurePolicy
		allowed bool // a decision while Redis is down
		ready   bool // /readyz while Redis is down
	}{
		{portero.FailAllow, true, true},
		{portero.FailDeny, false, false},
		{portero.FailLocal, true, true},
	} {
		t.Run(string(tt.policy), func(t *testing.T) {
			srv := redistest.Start(t)
			srv.Kill() // its address, nothing answering
			path := filepath.Join(t.TempDir(), "limits.yaml")
			writeFile(t, path, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
			r := startRLS(t, server.RLSOptions{ConfigPath: path, Store: "redis", RedisURL: srv.URL(), OnStoreError: tt.policy})
			if !strings.Contains(r.logs.String(), "redis does not answer yet") {
				t.Errorf("the log does not say Redis is down:\n%s", r.logs)
			}
			if code, _, body := get(t, r.http+"/readyz"); (code == 200) != tt.ready {
				t.Errorf("/readyz while Redis is down = %d %q, want ready %v", code, body, tt.ready)
			}
			ask := func(ip string) checkapi.CheckResponse {
				t.Helper()
				resp, err := http.Post(r.http+"/v1/check", "application/json",
					strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"`+ip+`"}]}]}`))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var out checkapi.CheckResponse
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
					t.Fatalf("/v1/check = %d, %v", resp.StatusCode, err)
				}
				return out
			}
			if out := ask("10.0.0.1"); out.Allowed != tt.allowed || out.Degraded == "" {
				t.Errorf("/v1/check while Redis is down = %+v, want allowed %v by the failure policy (degraded)", out, tt.allowed)
			}
			c, err := rlsclient.Dial(strings.TrimPrefix(r.grpc, "grpc://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			a, err := c.ShouldRateLimit(context.Background(), &descriptor.Request{Domain: "edge",
				Descriptors: []descriptor.Descriptor{{Entries: []descriptor.Entry{{Key: "remote_address", Value: "10.0.0.2"}}}}})
			if err != nil || (a.Code == descriptor.OK) != tt.allowed {
				t.Errorf("gRPC while Redis is down = %+v, %v; want allowed %v", a, err, tt.allowed)
			}

			srv.Restart()
			// Redis counts once the store has connected: the first decision
			// that leaves a key there, then exactly the limit.
			deadline := time.Now().Add(20 * time.Second)
			for {
				ask("10.0.0.3")
				if n, _ := redistest.Do(srv.Addr(), "DBSIZE"); n != "0" && n != "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis counts nothing 20 s after it started:\n%s", r.logs)
				}
				time.Sleep(20 * time.Millisecond)
			}
			var got []bool
			for range 4 {
				out := ask("10.0.0.4")
				if out.Degraded != "" {
					t.Errorf("after Redis answers, a degraded answer: %+v", out)
				}
				got = append(got, out.Allowed)
			}
			if fmt.Sprint(got) != "[true true true false]" {
				t.Errorf("after Redis answers, four checks = %v, want [true true true false] (3/hour counted in Redis)", got)
			}
			if code, _, body := get(t, r.http+"/readyz"); code != 200 {
				t.Errorf("/readyz with Redis up = %d %q", code, body)
			}
		})
	}
}

// TestRLSConfigErrors: what cannot run is a *ConfigError before anything
// listens.
func TestRLSConfigErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644)
	for _, o := range []server.RLSOptions{
		{},
		{ConfigPath: "no/such/dir"},
		{ConfigPath: bad},
		{ConfigPath: "../../examples/envoy/config", GRPCListen: "off", HTTPListen: "off"},
		{ConfigPath: "../../examples/envoy/config", GRPC: rls.ServerOptions{Transport: "quic"}},
		{ConfigPath: "../../examples/envoy/config", OnStoreError: portero.FailLocal},
		{ConfigPath: "../../examples/envoy/config", Store: "floppy", GRPCListen: "127.0.0.1:0", HTTPListen: "off", AdminListen: "off"},
		{ConfigPath: "../../examples/envoy/config", GRPCListen: "off", HTTPListen: "127.0.0.1:0", AdminListen: "off", HTTPTLS: tlsFiles("x.crt", "", "")},
	} {
		err := server.RunRLS(context.Background(), o)
		var ce *server.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("RunRLS(%+v) = %v, want a ConfigError", o, err)
		}
	}
}

func ExampleRunRLS() {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	off := time.Duration(0)
	var out strings.Builder
	err := server.RunRLS(ctx, server.RLSOptions{ConfigPath: "../../examples/envoy/config", GRPCListen: "off", HTTPListen: "127.0.0.1:0",
		AdminListen: "off", DrainPeriod: &off, Stdout: &out, Logger: slog.New(slog.DiscardHandler)})
	fmt.Println(err, regexp.MustCompile(`:\d+`).ReplaceAllString(out.String(), ":PORT"))
	// Output: <nil> portero rls: HTTP listening on http://127.0.0.1:PORT
}

func tlsFiles(cert, key, ca string) tlsreload.Files {
	return tlsreload.Files{CertFile: cert, KeyFile: key, ClientCAFile: ca}
}

// TestRLSEmptyFailurePolicy: no failure policy given is the engine's
// default, allow, at gRPC, /v1/check and /v1/auth alike (`portero rls`'s
// flag gives error): with a real redis-server's address and nothing
// answering there, every door admits uncounted and the instance is ready.
func TestRLSEmptyFailurePolicy(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	writeFile(t, path, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	r := startRLS(t, server.RLSOptions{ConfigPath: path, Store: "redis", RedisURL: srv.URL()})
	if code, _, body := get(t, r.http+"/readyz"); code != 200 {
		t.Errorf("/readyz while Redis is down = %d %q, want ready under allow", code, body)
	}
	resp, err := http.Post(r.http+"/v1/check", "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var out checkapi.CheckResponse
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !out.Allowed || out.Degraded == "" {
		t.Errorf("/v1/check while Redis is down = %d %+v, %v; want allowed by the failure policy (degraded)", resp.StatusCode, out, err)
	}
	if code, _, _ := get(t, r.http+"/v1/auth?domain=edge"); code != 200 {
		t.Errorf("/v1/auth while Redis is down = %d, want 200", code)
	}
	c, err := rlsclient.Dial(strings.TrimPrefix(r.grpc, "grpc://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.ShouldRateLimit(context.Background(), &descriptor.Request{Domain: "edge",
		Descriptors: []descriptor.Descriptor{{Entries: []descriptor.Entry{{Key: "remote_address", Value: "10.0.0.2"}}}}})
	if err != nil || a.Code != descriptor.OK {
		t.Errorf("gRPC while Redis is down = %+v, %v; want OK", a, err)
	}
}

// TestRLSLocalPolicySharedByAllDoors: under the failure policy local, with
// a real redis-server's address and nothing answering there, gRPC and
// /v1/auth count one limit in one local memory: their hits on one key add
// up to the limit, whichever door they came through.
func TestRLSLocalPolicySharedByAllDoors(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	writeFile(t, path, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	r := startRLS(t, server.RLSOptions{ConfigPath: path, Store: "redis", RedisURL: srv.URL(),
		OnStoreError: portero.FailLocal, AuthOnStoreError: portero.FailLocal})
	c, err := rlsclient.Dial(strings.TrimPrefix(r.grpc, "grpc://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	viaGRPC := func() string {
		t.Helper()
		a, err := c.ShouldRateLimit(context.Background(), &descriptor.Request{Domain: "edge",
			Descriptors: []descriptor.Descriptor{{Entries: []descriptor.Entry{{Key: "remote_address", Value: "127.0.0.1"}}}}})
		if err != nil {
			t.Fatalf("gRPC: %v", err)
		}
		return a.Code.String()
	}
	viaAuth := func() string {
		t.Helper()
		code, _, _ := get(t, r.http+"/v1/auth?domain=edge") // remote_address is the client's, 127.0.0.1
		return strconv.Itoa(code)
	}
	got := []string{viaGRPC(), viaGRPC(), viaAuth(), viaAuth(), viaGRPC()}
	if want := "[OK OK 200 429 OVER_LIMIT]"; fmt.Sprint(got) != want {
		t.Errorf("3/hour through gRPC, gRPC, /v1/auth, /v1/auth, gRPC = %v, want %s (one local count)", got, want)
	}
}
