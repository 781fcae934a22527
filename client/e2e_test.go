package client_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/portero-rl/portero/client"
)

// TestEndToEndRetryAfter runs against a real HTTP server on 127.0.0.1 that
// answers the first request with 429 and Retry-After: 2, then 200. The
// client must send nothing for those 2 seconds — neither the retry nor a
// second goroutine's fresh request, sent once the client has seen the 429
// — and then succeed, its retry waiting 2 s and less than a second of
// jitter. Real time: ~2 s; a loaded machine only makes it later.
func TestEndToEndRetryAfter(t *testing.T) {
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		n := len(arrivals)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":"rate limit exceeded"}`)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()

	var waits []client.Wait
	sawRetryAfter := make(chan struct{})
	c, err := client.NewClient(client.Config{Hooks: client.Hooks{OnWait: func(w client.Wait) {
		mu.Lock()
		defer mu.Unlock()
		waits = append(waits, w)
		if w.Reason == client.WaitRetryAfter {
			close(sawRetryAfter) // the host is held from here on
		}
	}}})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func() (int, string, error) {
		res, err := c.Get(srv.URL + "/thing")
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	}

	start := time.Now()
	var wg sync.WaitGroup
	var other int
	var otherErr error
	wg.Go(func() {
		<-sawRetryAfter
		other, _, otherErr = fetch()
	})
	code, body, err := fetch()
	wg.Wait()
	elapsed := time.Since(start)

	if err != nil || code != 200 || body != "ok" {
		t.Fatalf("GET = %d %q, %v, want 200 \"ok\"", code, body, err)
	}
	if otherErr != nil || other != 200 {
		t.Errorf("second goroutine: %d, %v, want 200", other, otherErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != 3 {
		t.Fatalf("server saw %d requests, want 3 (429, retry, second goroutine)", len(arrivals))
	}
	for i, a := range arrivals[1:] {
		if gap := a.Sub(arrivals[0]); gap < 2*time.Second {
			t.Errorf("request %d arrived %v after the 429, want >= 2s (Retry-After: 2)", i+2, gap)
		}
	}
	if elapsed < 2*time.Second {
		t.Errorf("GET took %v, want at least the 2s of Retry-After", elapsed)
	}
	if w := waits[0]; w.Reason != client.WaitRetryAfter || w.Duration-w.Jitter != 2*time.Second || w.Jitter < 0 || w.Jitter >= time.Second {
		t.Errorf("the retry waited %+v, want Retry-After's 2s and less than 1s of jitter", w)
	}
}
