package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/testenv"
)

// TestServeEndToEnd runs `portero serve` with no config through run(), on
// free ports read from its output, as the README's session does with curl.
func TestServeEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errb := &testenv.Buffer{}, &testenv.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--drain-period", "0"}, out, errb)
	}()
	re := regexp.MustCompile(`gateway listening on (http://\S+)`)
	var gw string
	for deadline := time.Now().Add(10 * time.Second); gw == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			gw = m[1]
		}
	}
	if gw == "" {
		t.Fatalf("no address printed\nstdout:\n%s\nstderr:\n%s", out, errb)
	}
	if !strings.Contains(out.String(), "admin listening on http://127.0.0.1:") {
		t.Errorf("admin address not printed:\n%s", out)
	}
	var codes []int
	var last *http.Response
	for range 12 {
		resp, err := http.Get(gw + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		last = resp
	}
	if codes[0] != 200 || last.StatusCode != 429 {
		t.Errorf("codes %v: want 200s then 429", codes)
	}
	if last.Header.Get("Retry-After") == "" || !strings.Contains(last.Header.Get("RateLimit"), `"per-client";r=0`) {
		t.Errorf("429 headers: %v", last.Header)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestConfigCommands(t *testing.T) {
	out, _, code := runCmd(t, "config", "default")
	if code != 0 || !strings.Contains(out, "rules:") {
		t.Fatalf("config default: %d\n%s", code, out)
	}
	def := writeFile(t, "default.yaml", out)
	t.Setenv("PORTERO_ADMIN_TOKEN", "test-token") // examples/gateway.yaml reads it
	if out, errs, code := runCmd(t, "config", "validate", def, "../../examples/gateway.yaml", "../../examples/overload.yaml"); code != 0 {
		t.Errorf("validate default and example: %d\n%s%s", code, out, errs)
	}
	bad := writeFile(t, "bad.yaml", "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules:\n  - {name: a, key: ip, limit: 1/s}\n  - {name: b, key: ip, limit: 1/s}\n  - {name: c, key: ip, limit: 0/min}\n  - {name: d, key: cookie, limit: 1/s}\n")
	_, errs, code := runCmd(t, "config", "validate", bad)
	if code != 2 {
		t.Errorf("validate bad: exit %d, want 2", code)
	}
	for _, want := range []string{"bad.yaml:6:31: rules[2].limit: 0/min: invalid limit: count 0: must be positive", "bad.yaml:7:20: rules[3].key"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if _, errs, code := runCmd(t, "serve", "--config", bad, "--listen", "127.0.0.1:0"); code != 2 || !strings.Contains(errs, "rules[2].limit") {
		t.Errorf("serve with a bad config: exit %d\n%s", code, errs)
	}
}
