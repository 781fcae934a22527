package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/store/memstore"
)

type seen struct {
	Path, XFF, Host string
}

// upstream is a real server that records what it was sent.
func upstream(t *testing.T) (*httptest.Server, *atomic.Int64, chan seen) {
	t.Helper()
	var calls atomic.Int64
	ch := make(chan seen, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		ch <- seen{r.URL.Path, r.Header.Get("X-Forwarded-For"), r.Host}
		w.Header().Set("X-Upstream", "yes")
		_, _ = io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls, ch
}

func gw(t *testing.T, yaml string) (*gateway.Gateway, *httptest.Server, *memstore.Store) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	g, err := gateway.New(cfg, store, gateway.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	g.SetReady(true)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv, store
}

func get(t *testing.T, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestProxyAndLimit(t *testing.T) {
	up, calls, ch := upstream(t)
	_, srv, _ := gw(t, fmt.Sprintf(`
upstreams:
  api: {url: %s}
routes:
  - name: v1
    match: {path: /v1/**}
    upstream: api
    strip_prefix: /v1
rules:
  - name: per-ip
    key: ip
    algorithm: fixed-window
    limit: 3/min
`, up.URL))
	resp, body := get(t, srv.URL+"/v1/items/7", "X-Forwarded-For", "6.6.6.6")
	if resp.StatusCode != 200 || body != "upstream /items/7" || resp.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("proxied: %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "" {
		t.Error("no RateLimit headers on a proxied response")
	}
	s := <-ch
	// No trusted proxies: the client's forged XFF is dropped, only the peer
	// is sent upstream.
	if s.XFF != "127.0.0.1" {
		t.Errorf("upstream saw X-Forwarded-For %q, want 127.0.0.1", s.XFF)
	}
	// No route: limited, then 404 problem.
	resp, body = get(t, srv.URL+"/other")
	if resp.StatusCode != 404 || !strings.Contains(body, "no route") {
		t.Errorf("no route: %d %s", resp.StatusCode, body)
	}
	// Spoofing X-Forwarded-For does not help: 1 + 1 above, 1 more, then 429.
	resp, _ = get(t, srv.URL+"/v1/x", "X-Forwarded-For", "1.2.3.4")
	if resp.StatusCode != 200 {
		t.Fatalf("third: %d", resp.StatusCode)
	}
	resp, body = get(t, srv.URL+"/v1/x", "X-Forwarded-For", "5.6.7.8")
	if resp.StatusCode != 429 || calls.Load() != 2 {
		t.Errorf("fourth: %d (upstream calls %d), want 429 and 2 calls", resp.StatusCode, calls.Load())
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(body), &p); err != nil || fmt.Sprint(p["violated-policies"]) != "[per-ip]" {
		t.Errorf("problem body %s: %v", body, err)
	}
	// Health endpoints are never limited.
	for range 5 {
		if resp, _ := get(t, srv.URL+"/healthz"); resp.StatusCode != 200 {
			t.Fatalf("healthz %d", resp.StatusCode)
		}
	}
}

func TestTrustedProxyChain(t *testing.T) {
	up, _, ch := upstream(t)
	_, srv, _ := gw(t, fmt.Sprintf(`
client_ip: {trusted_proxies: [127.0.0.0/8]}
upstreams: {api: {url: %s}}
routes: [{upstream: api}]
rules: [{name: per-ip, key: ip, algorithm: fixed-window, limit: 1/min}]
`, up.URL))
	if resp, _ := get(t, srv.URL, "X-Forwarded-For", "203.0.113.1"); resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	if s := <-ch; s.XFF != "203.0.113.1, 127.0.0.1" {
		t.Errorf("upstream saw %q, want the chain plus the peer", s.XFF)
	}
	if resp, _ := get(t, srv.URL, "X-Forwarded-For", "203.0.113.2"); resp.StatusCode != 200 {
		t.Errorf("another client behind the proxy: %d", resp.StatusCode)
	}
	if resp, _ := get(t, srv.URL, "X-Forwarded-For", "203.0.113.1"); resp.StatusCode != 429 {
		t.Errorf("same client again: %d", resp.StatusCode)
	}
}

func TestBadUpstream(t *testing.T) {
	// A port nobody listens on.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	// An upstream that answers garbage.
	garbage, _ := net.Listen("tcp", "127.0.0.1:0")
	defer garbage.Close()
	go func() {
		for {
			c, err := garbage.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("NOT HTTP AT ALL\r\n\r\n"))
			c.Close()
		}
	}()
	_, srv, _ := gw(t, fmt.Sprintf(`
upstreams:
  down: {url: "http://%s"}
  junk: {url: "http://%s"}
routes:
  - {match: {path: /down}, upstream: down}
  - {upstream: junk}
`, addr, garbage.Addr()))
	for _, p := range []string{"/down", "/junk"} {
		resp, body := get(t, srv.URL+p)
		if resp.StatusCode != 502 || !strings.Contains(body, "did not answer") {
			t.Errorf("%s: %d %s, want 502", p, resp.StatusCode, body)
		}
	}
}

func TestReadyAndUpdate(t *testing.T) {
	g, srv, store := gw(t, `
upstreams: {demo: {type: demo}}
routes: [{upstream: demo}]
rules: [{name: g, key: global, algorithm: fixed-window, limit: 2/min}]
`)
	get(t, srv.URL)
	cfg2, err := config.Parse("v2.yaml", []byte(`
upstreams: {demo: {type: demo}}
routes: [{upstream: demo}]
rules:
  - {name: g, key: global, algorithm: fixed-window, limit: 2/min}
  - {name: new, key: ip, algorithm: fixed-window, limit: 100/min}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Update(cfg2, store); err != nil {
		t.Fatal(err)
	}
	get(t, srv.URL)
	// "g" kept its counter across the update: the third request is refused.
	if resp, _ := get(t, srv.URL); resp.StatusCode != 429 {
		t.Errorf("after update: %d, want 429 (counter kept)", resp.StatusCode)
	}
	g.SetReady(false)
	if resp, _ := get(t, srv.URL+"/readyz"); resp.StatusCode != 503 {
		t.Errorf("readyz while draining: %d", resp.StatusCode)
	}
}

func TestMaxInFlight(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	defer up.Close()
	_, srv, _ := gw(t, fmt.Sprintf(`
server: {max_in_flight: 1}
upstreams: {api: {url: %s}}
routes: [{upstream: api}]
`, up.URL))
	done := make(chan int, 1)
	go func() {
		resp, err := http.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
			done <- resp.StatusCode
			return
		}
		done <- 0
	}()
	<-entered
	resp, body := get(t, srv.URL)
	close(release)
	if resp.StatusCode != 503 || !strings.Contains(body, "temporary-reduced-capacity") || resp.Header.Get("Retry-After") == "" {
		t.Errorf("over max_in_flight: %d %s, want 503", resp.StatusCode, body)
	}
	if c := <-done; c != 200 {
		t.Errorf("first: %d", c)
	}
}

// TestRouteKey checks that the route the gateway matched reaches the
// limiter: a rule keyed by route counts each route apart, under its name.
func TestRouteKey(t *testing.T) {
	up, _, _ := upstream(t)
	_, srv, _ := gw(t, fmt.Sprintf(`
upstreams:
  api: {url: %s}
routes:
  - name: alpha
    match: {path: /a/**}
    upstream: api
  - name: beta
    match: {path: /b/**}
    upstream: api
rules:
  - name: per-route
    key: route
    algorithm: fixed-window
    limit: 1/min
`, up.URL))
	for _, tt := range []struct {
		path string
		want int
	}{{"/a/1", 200}, {"/a/2", 429}, {"/b/1", 200}, {"/b/2", 429}, {"/c", 404}, {"/d", 429}} {
		if resp, body := get(t, srv.URL+tt.path); resp.StatusCode != tt.want {
			t.Errorf("GET %s: %d %s, want %d", tt.path, resp.StatusCode, body, tt.want)
		}
	}
}

// TestProblemsAreWholeAnswers: the gateway's own problem answers (no
// route, an upstream that does not answer) are written as every HTTP
// door's: problem+json with its Content-Length, nosniff and no-store.
func TestProblemsAreWholeAnswers(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	_, srv, _ := gw(t, fmt.Sprintf(`
upstreams:
  down: {url: "http://%s"}
routes:
  - {match: {path: /down}, upstream: down}
`, addr))
	for path, status := range map[string]int{"/down": 502, "/nowhere": 404} {
		resp, body := get(t, srv.URL+path)
		h := resp.Header
		if resp.StatusCode != status || h.Get("Content-Type") != "application/problem+json" || h.Get("Content-Length") != fmt.Sprint(len(body)) ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: %d %v %s; want %d, a problem with its length, nosniff, no-store", path, resp.StatusCode, h, body, status)
		}
	}
}
