package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/store/memstore"
)

// hotPathConfig is the shape scripts/bench-gateway.sh measures: the default
// policy's three rules (a per-client token bucket, a POST /login rule that
// GET does not match, a global sliding counter) in front of one upstream.
func hotPathConfig(upstream, perClient string) string {
	return fmt.Sprintf(`
upstreams:
  app: {url: %s}
routes:
  - upstream: app
rules:
  - name: per-client
    key: ip
    algorithm: token-bucket
    limit: %s
  - name: login
    match: {methods: [POST], path: /login}
    key: ip
    algorithm: sliding-counter
    limit: 3/min
  - name: global
    key: global
    algorithm: sliding-counter
    limit: 100000000/s
`, upstream, perClient)
}

// okUpstream is a real loopback server answering "ok\n", as the benchmark's.
func okUpstream(tb testing.TB) *httptest.Server {
	tb.Helper()
	ok := []byte("ok\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(ok)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

func hotGateway(tb testing.TB, yaml string) *gateway.Gateway {
	tb.Helper()
	cfg, err := config.Parse("hot.yaml", []byte(yaml))
	if err != nil {
		tb.Fatal(err)
	}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close(context.Background()) })
	g, err := gateway.New(cfg, store, gateway.Hooks{})
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

// sink is a ResponseWriter that keeps the status only, so that what is
// measured is the gateway's own work.
type sink struct {
	h    http.Header
	code int
	n    int
}

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) Write(p []byte) (int, error) { s.n += len(p); return len(p), nil }
func (s *sink) WriteHeader(code int)        { s.code = code }

func (s *sink) serve(h http.Handler, r *http.Request) {
	clear(s.h)
	s.code, s.n = http.StatusOK, 0
	h.ServeHTTP(s, r)
}

// bytesPerRequest is the heap the process allocates per proxied request
// (the gateway, its Transport and the loopback upstream together).
func bytesPerRequest(t *testing.T, g http.Handler, n int) uint64 {
	t.Helper()
	w := &sink{h: http.Header{}}
	r := httptest.NewRequest("GET", "/items/1", nil)
	for range 20 { // connections, pools
		w.serve(g, r)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		w.serve(g, r)
		if w.code != http.StatusOK || w.n != 3 {
			t.Fatalf("proxied: status %d, %d bytes, want 200 and 3", w.code, w.n)
		}
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(n)
}

// TestProxyReusesCopyBuffers: ReverseProxy without a BufferPool allocates a
// 32 KiB buffer for every response it copies, which made the garbage
// collector the largest cost of a proxied request. With the pool the whole
// round trip allocates a few KiB.
func TestProxyReusesCopyBuffers(t *testing.T) {
	g := hotGateway(t, hotPathConfig(okUpstream(t).URL, "10000000/s burst 10000000"))
	got := bytesPerRequest(t, g, 300)
	t.Logf("%d bytes allocated per proxied request", got)
	// Under -race sync.Pool drops a quarter of what it is given.
	limit := uint64(16 << 10)
	if raceEnabled {
		limit = 24 << 10
	}
	if got >= limit {
		t.Errorf("a proxied request allocates %d bytes, want < %d (is the copy buffer pooled?)", got, limit)
	}
}

// BenchmarkGateway is the gateway in process, in front of a loopback
// upstream: pass (the decision and the proxy), refuse (the decision and the
// 429), and bare-429, a handler that sets the same refusal's headers and
// writes its body as scripts/bench-gateway.sh's bare-429 subject does: the
// least any handler spends on those bytes.
func BenchmarkGateway(b *testing.B) {
	up := okUpstream(b)
	r := httptest.NewRequest("GET", "/items/1", nil)
	for _, bc := range []struct {
		name, limit string
		want        int
	}{
		{"pass", "10000000/s burst 10000000", http.StatusOK},
		{"refuse", "1/h", http.StatusTooManyRequests},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g := hotGateway(b, hotPathConfig(up.URL, bc.limit))
			w := &sink{h: http.Header{}}
			w.serve(g, r) // a refusing rule's one admitted request
			b.ReportAllocs()
			for b.Loop() {
				w.serve(g, r)
				if w.code != bc.want {
					b.Fatalf("status %d, want %d", w.code, bc.want)
				}
			}
		})
	}
	b.Run("bare-429", func(b *testing.B) {
		g := hotGateway(b, hotPathConfig(up.URL, "1/h"))
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, r)
		rec = httptest.NewRecorder()
		g.ServeHTTP(rec, r)
		if rec.Code != http.StatusTooManyRequests {
			b.Fatalf("status %d, want 429", rec.Code)
		}
		header, body := rec.Header().Clone(), rec.Body.Bytes()
		bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			for k, v := range header {
				h[k] = v
			}
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write(body)
		})
		w := &sink{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			w.serve(bare, r)
		}
	})
}

// TestAcceptEncodingPassesThrough: the upstream sees the client's
// Accept-Encoding as it is. The Transport's default would ask the upstream
// for gzip for a client that did not, then decompress the answer in the
// gateway: work (and a header map per request) for nothing.
func TestAcceptEncodingPassesThrough(t *testing.T) {
	seen := make(chan []string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header["Accept-Encoding"]
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer up.Close()
	g := hotGateway(t, hotPathConfig(up.URL, "1000/s"))
	srv := httptest.NewServer(g)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	for _, tc := range []struct {
		send string
		want []string
	}{
		{"", nil},
		{"br", []string{"br"}},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
		if tc.send != "" {
			req.Header.Set("Accept-Encoding", tc.send)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := <-seen; fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("client sent Accept-Encoding %q: upstream saw %q, want %q", tc.send, got, tc.want)
		}
	}
}

// TestOverloadAllocatesOnlyItsTicket: the overload section costs a request
// the Gate's one Ticket and nothing more; the handler it admits into is
// built with the table, not as a closure per request.
func TestOverloadAllocatesOnlyItsTicket(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	r := httptest.NewRequest("GET", "/items/1", nil)
	allocs := func(yaml string) float64 {
		g := hotGateway(t, yaml)
		w := &sink{h: http.Header{}}
		w.serve(g, r) // the one request 1/h admits
		n := testing.AllocsPerRun(100, func() { w.serve(g, r) })
		if w.code != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", w.code)
		}
		return n
	}
	cfg := hotPathConfig("http://127.0.0.1:1", "1/h")
	off, on := allocs(cfg), allocs(cfg+"overload:\n  max_in_flight: 100\n")
	if on > off+1 {
		t.Errorf("a refused request allocates %v times with the overload section, %v without, want at most one more (the Ticket)", on, off)
	}
}

// TestKeyHeaderNotCanonicalizedPerRequest: the API key header is looked up
// under its canonical form computed with the table, so that the default
// X-API-Key costs a request no more than a name written canonically
// (Header.Get canonicalized it, allocating, on every request).
func TestKeyHeaderNotCanonicalizedPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	allocs := func(name string) float64 {
		yaml := strings.Replace(planYAML("http://127.0.0.1:1"), "api_keys:\n", "api_keys:\n  header: "+name+"\n", 1)
		g := hotGateway(t, yaml)
		r := httptest.NewRequest("GET", "/pets/1", nil)
		r.Host = "api.example.com"
		r.Header.Set(name, "basic-key")
		w := &sink{h: http.Header{}}
		for range 6 { // past the basic plan's quota of 5: refused, nothing proxied
			w.serve(g, r)
		}
		n := testing.AllocsPerRun(50, func() { w.serve(g, r) })
		if w.code != http.StatusTooManyRequests {
			t.Fatalf("header %s: status %d, want 429 (the key was not found?)", name, w.code)
		}
		return n
	}
	if def, canon := allocs("X-API-Key"), allocs("X-Api-Key"); def != canon {
		t.Errorf("a keyed request allocates %v times under X-API-Key, %v under X-Api-Key, want the same", def, canon)
	}
}
