package checkapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/portero-rl/portero/internal/nginxtest"
	"github.com/portero-rl/portero/store/memstore"
)

// nginxExample is examples/nginx/portero.conf running in a real nginx, in
// front of a real upstream (app), with Portero (portero) deciding through
// /v1/auth; it counts Portero's calls and the upstream's, and keeps the
// last X-Portero-Decision the upstream saw.
type nginxExample struct {
	ngx                *nginxtest.Server
	portero            *httptest.Server
	authCalls, appHits atomic.Int64
	lastDecision       atomic.Value
}

func startNginxExample(t *testing.T) *nginxExample {
	t.Helper()
	nginxtest.Binary(t) // skip early (or fail under CI) without nginx
	ms, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close(context.Background()) })
	h, err := New(doorConfig(t, ms, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	x := &nginxExample{}
	x.portero = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x.authCalls.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(x.portero.Close)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x.appHits.Add(1)
		x.lastDecision.Store(r.Header.Get("X-Portero-Decision"))
		io.WriteString(w, "app ok\n")
	}))
	t.Cleanup(app.Close)
	raw, err := os.ReadFile("../../examples/nginx/portero.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(raw)
	for _, sub := range [][2]string{
		{"server 127.0.0.1:8082;", "server " + strings.TrimPrefix(x.portero.URL, "http://") + ";"},
		{"server 127.0.0.1:9000;", "server " + strings.TrimPrefix(app.URL, "http://") + ";"},
		{"listen 8000;", "listen {{LISTEN}};"},
	} {
		if !strings.Contains(conf, sub[0]) {
			t.Fatalf("examples/nginx/portero.conf does not contain %q: update this test with the example", sub[0])
		}
		conf = strings.ReplaceAll(conf, sub[0], sub[1])
	}
	x.ngx = nginxtest.Start(t, conf)
	return x
}

// TestNginxAuthRequest runs examples/nginx/portero.conf in a real nginx, in
// front of a real upstream, with Portero deciding through /v1/auth.
func TestNginxAuthRequest(t *testing.T) {
	x := startNginxExample(t)
	ngx, portero := x.ngx, x.portero
	authCalls, appHits, lastDecision := &x.authCalls, &x.appHits, &x.lastDecision
	get := func(ip string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", ngx.URL()+"/orders?id=7", nil)
		req.Header.Set("X-Forwarded-For", ip)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	// 10 per second per client address.
	for i := 0; i < 10; i++ {
		resp, body := get("203.0.113.50", nil)
		if resp.StatusCode != 200 || body != "app ok\n" {
			t.Fatalf("request %d: %d %q\n%s", i, resp.StatusCode, body, ngx.ErrorLog())
		}
		if got, want := resp.Header.Get("RateLimit"), fmt.Sprintf(`"edge.remote_address";r=%d;t=1`, 9-i); got != want {
			t.Fatalf("request %d: RateLimit = %q, want %q", i, got, want)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"edge.remote_address";q=10;w=1` {
			t.Fatalf("RateLimit-Policy = %q", got)
		}
	}
	if d := lastDecision.Load(); d != "allowed" {
		t.Errorf("upstream saw X-Portero-Decision %q, want allowed", d)
	}
	before := appHits.Load()
	resp, body := get("203.0.113.50", nil)
	if resp.StatusCode != 429 {
		t.Fatalf("11th request: %d %q, want 429\n%s", resp.StatusCode, body, ngx.ErrorLog())
	}
	if appHits.Load() != before {
		t.Error("a refused request reached the upstream")
	}
	for name, want := range map[string]string{
		"Retry-After":      "1",
		"RateLimit":        `"edge.remote_address";r=0;t=1`,
		"RateLimit-Policy": `"edge.remote_address";q=10;w=1`,
		"Cache-Control":    "no-store",
		"Content-Type":     "application/problem+json",
	} {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("429 %s = %q, want %q", name, got, want)
		}
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(body), &p); err != nil || p["status"] != float64(429) {
		t.Errorf("429 body %q: %v", body, err)
	}
	// Another client is counted apart.
	if resp, _ := get("203.0.113.51", nil); resp.StatusCode != 200 {
		t.Errorf("other client: %d", resp.StatusCode)
	}
	// Per API key and plan, across client addresses: the free plan has 60/min.
	key := map[string]string{"X-Api-Key": "k-42", "X-Plan": "free"}
	for i := 0; i < 60; i++ {
		if resp, _ := get(fmt.Sprintf("198.51.100.%d", i+1), key); resp.StatusCode != 200 {
			t.Fatalf("free plan request %d: %d", i, resp.StatusCode)
		}
	}
	resp, _ = get("198.51.100.200", key)
	if resp.StatusCode != 429 || !strings.Contains(resp.Header.Get("RateLimit"), `"free";r=0`) {
		t.Errorf("61st free-plan request: %d RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// Portero down: nginx answers 500 (auth_request fails closed).
	calls := authCalls.Load()
	portero.Close()
	resp, _ = get("203.0.113.60", nil)
	if resp.StatusCode != 500 {
		t.Errorf("with Portero down: %d, want 500", resp.StatusCode)
	}
	if calls == 0 {
		t.Error("Portero was never asked")
	}
}

// TestNginxExampleConfig checks that the complete examples/nginx/nginx.conf
// (which includes portero.conf) is accepted by nginx as shipped.
func TestNginxExampleConfig(t *testing.T) {
	bin := nginxtest.Binary(t)
	dir, err := filepath.Abs("../../examples/nginx")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-t", "-p", dir, "-c", "nginx.conf", "-e", filepath.Join(t.TempDir(), "error.log")).CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -t examples/nginx/nginx.conf: %v\n%s", err, out)
	}
}
