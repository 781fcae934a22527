package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/checkapi"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/rlsclient"
	"github.com/portero-rl/portero/internal/testenv"
)

// startRLS runs `portero rls` on loopback ports and returns its gRPC and
// HTTP addresses; the server stops at the end of the test.
func startRLS(t *testing.T, extra ...string) (grpcAddr, httpAddr string) {
	t.Helper()
	args := append([]string{"rls", "--config", "../../examples/envoy/config", "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--log-level", "warn"}, extra...)
	m := startCommand(t, "portero rls", args, regexp.MustCompile(`gRPC listening on grpcs?://(\S+) \(\S+\)\n[\s\S]*HTTP listening on https?://(\S+)\n`))
	return m[1], m[2]
}

// startCommand runs run(args) until the end of the test, named name in
// failures, and returns the submatches of re once its output matches.
func startCommand(t *testing.T, name string, args []string, re *regexp.Regexp) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &testenv.Buffer{}, &testenv.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, out, errOut) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s returned %v; stderr: %s", name, err, errOut)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not stop", name)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		select {
		case err := <-done:
			t.Fatalf("%s exited: %v; stderr: %s", name, err, errOut)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("%s did not report its addresses; stdout: %s stderr: %s", name, out, errOut)
	return nil
}

// waitReady waits until the server at url answers /readyz with 200.
func waitReady(t *testing.T, url string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/readyz: not ready after 30 s (%v)", url, err)
		}
	}
}

func runCheck(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"check"}, args...), &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestRLSAndCheck(t *testing.T) {
	for _, transport := range []string{"lean", "grpc-go"} {
		t.Run(transport, func(t *testing.T) { testRLSAndCheck(t, transport) })
	}
}

func testRLSAndCheck(t *testing.T, transport string) {
	g, h := startRLS(t, "--grpc-transport", transport)
	servers := []string{"grpc://" + g, "http://" + h}
	if transport != "lean" {
		servers = servers[:1] // the HTTP door does not depend on the gRPC transport
	}
	for _, server := range servers {
		t.Run(strings.SplitN(server, ":", 2)[0], func(t *testing.T) {
			// The example's limit is 10 per clock-aligned second: the 11
			// checks must fall in one second, so each try starts just after a
			// second begins, and a try that a slow machine stretched over a
			// boundary is repeated with a fresh address.
			var out string
			var err error
			for try := 0; ; try++ {
				ip := fmt.Sprintf("remote_address=10.%d.0.%d", try, map[bool]int{true: 1, false: 2}[strings.HasPrefix(server, "grpc")])
				time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 5*time.Millisecond)))
				start := time.Now()
				for i := 0; i < 10; i++ {
					out, err := runCheck(t, "--server", server, "--domain", "edge", "-d", ip)
					if err != nil || !strings.HasPrefix(out, "OK") {
						t.Fatalf("check %d: %v\n%s", i, err, out)
					}
				}
				out, err = runCheck(t, "--server", server, "--domain", "edge", "-d", ip)
				if time.Now().Truncate(time.Second).Equal(start.Truncate(time.Second)) || try == 4 {
					break
				}
				t.Logf("try %d crossed a second boundary; again", try)
			}
			if !errors.Is(err, errRefused) || exitCode(err) != 1 || !strings.HasPrefix(out, "OVER_LIMIT") || !strings.Contains(out, "Retry-After: ") {
				t.Fatalf("11th check: %v\n%s", err, out)
			}
			// Check-only, limit override, JSON: the shape of POST /v1/check
			// over either door, not Go's field names.
			out, err = runCheck(t, "--server", server, "--domain", "edge", "-d", "api_key=k,plan=gold;hits=0", "--json")
			if err != nil || !strings.Contains(out, "gold") {
				t.Fatalf("check-only: %v\n%s", err, out)
			}
			var js checkapi.CheckResponse
			dec := json.NewDecoder(strings.NewReader(out))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&js); err != nil || !js.Allowed || js.Code != "OK" || len(js.Descriptors) != 1 ||
				js.Descriptors[0].Counted || js.Descriptors[0].Unit == "" || strings.Contains(out, `"Code"`) {
				t.Fatalf("--json answer is not /v1/check's (allowed, OK, one descriptor with a unit, not counted under hits=0): %v\n%s", err, out)
			}
			out, err = runCheck(t, "--server", server, "--domain", "edge", "-d", "x=y;limit=1/hour", "--hits", "2")
			if !errors.Is(err, errRefused) {
				t.Fatalf("cost 2 on 1/hour: %v\n%s", err, out)
			}
			// The server's errors reach the operator.
			out, err = runCheck(t, "--server", server, "--domain", "nope", "-d", "a=b")
			if err == nil || errors.Is(err, errRefused) || exitCode(err) != 3 || !strings.Contains(err.Error(), `unknown domain "nope"`) {
				t.Fatalf("unknown domain: %v\n%s", err, out)
			}
		})
	}
}

func TestCheckUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--domain", "edge"},
		{"--domain", "edge", "-d", "novalue"},
		{"--domain", "edge", "-d", "a=b;hits=x"},
		{"--domain", "edge", "-d", "a=b;limit=5/fortnight"},
		{"--domain", "edge", "-d", "a=b;bogus"},
		{"--server", "ftp://x", "--domain", "edge", "-d", "a=b"},
		{"--policy", "p", "--key", "k"}, // needs HTTP
	} {
		if _, err := runCheck(t, args...); exitCode(err) != 2 {
			t.Errorf("check %v: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
	// Nothing listens: no answer, exit status 3 (1 is a refusal).
	for _, server := range []string{"http://127.0.0.1:1", "grpc://127.0.0.1:1"} {
		if _, err := runCheck(t, "--server", server, "--domain", "edge", "-d", "a=b", "--timeout", "2s"); exitCode(err) != 3 {
			t.Errorf("unreachable server %s: %v (exit %d), want exit 3", server, err, exitCode(err))
		}
	}
	// The help's examples are ones that work against portero rls.
	out, _, _ := runCmd(t, "check", "--help")
	if strings.Contains(out, "--policy api --key alice") || !strings.Contains(out, "exit status is 0 when allowed, 1 when over the limit, 2 for a usage\nerror and 3") {
		t.Errorf("check --help:\n%s", out)
	}
}

func TestRLSUsage(t *testing.T) {
	for _, args := range [][]string{
		{"rls"},
		{"rls", "--config", "../../examples/envoy/config", "--on-store-error", "maybe"},
		{"rls", "--config", "../../examples/envoy/config", "--store", "floppy", "--grpc-listen", "127.0.0.1:0", "--http-listen", "off"},
		{"rls", "--config", "no/such/dir"},
		{"rls", "--config", "../../examples/envoy/config", "--grpc-listen", "off", "--http-listen", "off"},
		{"rls", "--config", "../../examples/envoy/config", "--grpc-transport", "quic", "--grpc-listen", "127.0.0.1:0", "--http-listen", "off"},
		// One failure policy, one vocabulary: other flags and spellings are usage errors.
		{"rls", "--config", "../../examples/envoy/config", "--redis-failure", "fail-closed"},
		{"rls", "--config", "../../examples/envoy/config", "--on-store-error", "closed"},
		{"rls", "--config", "../../examples/envoy/config", "--auth-on-store-error", "open"},
		{"rls", "--config", "../../examples/envoy/config", "--on-store-error", "local"}, // the memory store does not fail
		{"rls", "--config", "../../examples/envoy/config", "--drain-period", "-1s"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if exitCode(err) != 2 {
			t.Errorf("%v: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
	// TLS files and the admin token: the error names the flag at fault.
	for args, want := range map[string]string{
		"--http-tls-cert x.crt":                          "--http-tls-key: required with TLS",
		"--admin-tls-key k.pem":                          "--admin-tls-cert: required with TLS",
		"--admin-tls-cert no.crt --admin-tls-key no.key": "--admin-tls-cert: no.crt: no such file or directory",
		"--admin-token-env PORTERO_TEST_NO_SUCH_TOKEN":   "--admin-token-env: environment variable PORTERO_TEST_NO_SUCH_TOKEN is empty or unset",
	} {
		var errOut bytes.Buffer
		err := run(context.Background(), append([]string{"rls", "--config", "../../examples/envoy/config"}, strings.Fields(args)...), io.Discard, &errOut)
		if exitCode(err) != 2 || !strings.Contains(errOut.String(), want) {
			t.Errorf("rls %s: exit %d, stderr %q; want 2 and %q", args, exitCode(err), errOut.String(), want)
		}
	}
}

// TestRLSFailClosed: behind a real redis-server that dies, `portero rls
// --on-store-error deny` refuses (OVER_LIMIT, and /v1/check allowed:false)
// rather than failing the call (which Envoy, by its default, lets
// through); with the default flags it reports the failure (UNAVAILABLE,
// 503), so that Envoy's failure_mode_deny decides, and says so in --help.
func TestRLSFailClosed(t *testing.T) {
	srv := redistest.Start(t)
	deny, denyHTTP := startRLS(t, "--store", "redis", "--redis-url", srv.URL(), "--on-store-error", "deny")
	def, defHTTP := startRLS(t, "--store", "redis", "--redis-url", srv.URL())
	ask := func(addr string) (*rlsclient.Answer, error) {
		c, err := rlsclient.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.ShouldRateLimit(ctx, &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{{Entries: []descriptor.Entry{{Key: "remote_address", Value: "10.9.0.1"}}}}})
	}
	check := func(addr string) (int, checkapi.CheckResponse) {
		resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.9.0.2"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out checkapi.CheckResponse
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	// The store dials Redis in the background, and until it has answered
	// the failure policy decides: under deny and error the instance says
	// it is not ready until then.
	for _, addr := range []string{denyHTTP, defHTTP} {
		waitReady(t, "http://"+addr)
	}
	if a, err := ask(deny); err != nil || a.Code != descriptor.OK {
		t.Fatalf("Redis up: %+v, %v", a, err)
	}
	srv.Kill()
	t.Cleanup(srv.Restart)
	if a, err := ask(deny); err != nil || a.Code != descriptor.OverLimit {
		t.Errorf("deny, Redis down: gRPC %+v, %v; want OVER_LIMIT", a, err)
	}
	if code, out := check(denyHTTP); code != 200 || out.Allowed || out.Degraded == "" {
		t.Errorf("deny, Redis down: /v1/check %d %+v; want refused, degraded", code, out)
	}
	if _, err := ask(def); err == nil || !strings.Contains(err.Error(), "Unavailable") {
		t.Errorf("default flags, Redis down: gRPC %v; want UNAVAILABLE", err)
	}
	if code, _ := check(defHTTP); code != 503 {
		t.Errorf("default flags, Redis down: /v1/check %d; want 503", code)
	}
	out, _, _ := runCmd(t, "rls", "--help")
	if !strings.Contains(out, "--on-store-error string") || !strings.Contains(out, "failure_mode_deny") || strings.Contains(out, "redis-failure") {
		t.Errorf("rls --help does not describe the one failure policy flag:\n%s", out)
	}
}

// TestRLSWatchConfigMap: `rls --watch` on a mounted ConfigMap directory
// reloads when the kubelet swaps ..data, through the same watcher as
// serve (internal/watch), and the new limits answer.
func TestRLSWatchConfigMap(t *testing.T) {
	dir := t.TempDir()
	conf := func(n int) string {
		return fmt.Sprintf("domain: cm\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", n)
	}
	publish := func(gen int, content string) {
		ts := fmt.Sprintf("..2026_05_01_10_00_%02d.000000001", gen)
		os.Mkdir(filepath.Join(dir, ts), 0o755)
		os.WriteFile(filepath.Join(dir, ts, "limits.yaml"), []byte(content), 0o644)
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		os.Symlink(ts, filepath.Join(dir, "..data_tmp"))
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if old != "" {
			os.RemoveAll(filepath.Join(dir, old))
		} else {
			os.Symlink("..data/limits.yaml", filepath.Join(dir, "limits.yaml"))
		}
	}
	publish(1, conf(1))
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &testenv.Buffer{}, &testenv.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"rls", "--config", dir, "--watch", "--grpc-listen", "off", "--http-listen", "127.0.0.1:0", "--admin-listen", "off"}, out, errOut)
	}()
	defer func() { cancel(); <-done }()
	re := regexp.MustCompile(`HTTP listening on http://(\S+)\n`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("rls did not start:\n%s\n%s", out, errOut)
		}
	}
	check := func(key string) string {
		o, _ := runCheck(t, "--server", "http://"+addr, "--domain", "cm", "-d", "k="+key)
		return strings.Fields(o + " x")[0]
	}
	if a, b := check("a"), check("a"); a != "OK" || b != "OVER_LIMIT" {
		t.Fatalf("1/hour before the update: %s then %s", a, b)
	}
	publish(2, conf(5))
	waitFor := time.Now().Add(15 * time.Second)
	for !strings.Contains(errOut.String(), "rls: configuration reloaded") {
		if time.Now().After(waitFor) {
			t.Fatalf("no reload after the kubelet's swap:\n%s", errOut)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a, b := check("b"), check("b"); a != "OK" || b != "OK" {
		t.Errorf("5/hour after the update: %s then %s", a, b)
	}
}
