package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero/client"
	"github.com/portero-rl/portero/internal/server"
)

// recorder is the client's transport: it notes when each attempt leaves
// and what came back, then sends it for real.
type recorder struct {
	mu       sync.Mutex
	sent     []time.Time
	answered []time.Time
	statuses []int
	retry    []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.sent = append(r.sent, time.Now())
	r.mu.Unlock()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.answered = append(r.answered, time.Now())
		r.statuses = append(r.statuses, resp.StatusCode)
		r.retry = append(r.retry, resp.Header.Get("Retry-After"))
		r.mu.Unlock()
	}
	return resp, err
}

// TestPoliteClientThroughGateway is the polite client's end-to-end test
// against Portero's own gateway: a rule of one request per 2 s answers the second
// request with 429 and Retry-After: 2; Portero's client sends nothing in
// those 2 seconds, then retries and succeeds. Real time: about 2 s.
func TestPoliteClientThroughGateway(t *testing.T) {
	var upstreamHits atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		upstreamHits.Add(1)
		io.WriteString(w, "ok")
	}))
	defer upstream.Close()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
upstreams: {api: {url: %q}}
routes: [{upstream: api}]
rules: [{name: slow, key: global, algorithm: token-bucket, limit: 1/2s}]
`, upstream.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := start(t, server.Options{ConfigPath: path, AdminListen: "off"})

	// The first request takes the only token.
	if code, _, body := get(t, r.gateway+"/thing"); code != http.StatusOK {
		t.Fatalf("first request: %d %s", code, body)
	}
	rec := &recorder{}
	c, err := client.NewClient(client.Config{Transport: rec})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Get(r.gateway + "/thing")
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("client got %d %q, want 200 ok after waiting", res.StatusCode, body)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.sent) != 2 || rec.statuses[0] != http.StatusTooManyRequests || rec.retry[0] != "2" || rec.statuses[1] != http.StatusOK {
		t.Fatalf("attempts %d, statuses %v, Retry-After %q: want a 429 with Retry-After: 2, then one 200", len(rec.sent), rec.statuses, rec.retry)
	}
	if gap := rec.sent[1].Sub(rec.answered[0]); gap < 2*time.Second {
		t.Errorf("the retry left %v after the 429 arrived, inside the 2 s the gateway asked for", gap)
	}
	if n := upstreamHits.Load(); n != 2 {
		t.Errorf("upstream saw %d requests, want 2: the refused one never reaches it", n)
	}
}
