package client

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// call is what the fake transport saw of one attempt.
type call struct {
	at     time.Time
	method string
	body   string
	key    string
}

// fakeRT is an in-memory http.RoundTripper: inside a synctest bubble nothing
// it does blocks on the network, so fake time is exact.
type fakeRT struct {
	mu      sync.Mutex
	calls   []call
	respond func(n int, req *http.Request) (*http.Response, error)
}

func (f *fakeRT) RoundTrip(req *http.Request) (*http.Response, error) {
	var body string
	if req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		_ = req.Body.Close()
		body = string(b)
	}
	f.mu.Lock()
	f.calls = append(f.calls, call{at: time.Now(), method: req.Method, body: body, key: req.Header.Get("Idempotency-Key")})
	n := len(f.calls)
	f.mu.Unlock()
	return f.respond(n, req)
}

func (f *fakeRT) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// resp builds a response with status code and header pairs.
func resp(code int, kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: h, Body: io.NopCloser(strings.NewReader("body"))}
}

// script answers attempt n with the n-th response of rs (the last one
// repeats).
func script(rs ...func() *http.Response) func(int, *http.Request) (*http.Response, error) {
	return func(n int, _ *http.Request) (*http.Response, error) {
		if n > len(rs) {
			n = len(rs)
		}
		return rs[n-1](), nil
	}
}

func r(code int, kv ...string) func() *http.Response {
	return func() *http.Response { return resp(code, kv...) }
}

func newTransport(t *testing.T, f *fakeRT, cfg Config) *Transport {
	t.Helper()
	cfg.Transport = f
	tr, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tr
}

// gaps returns the time between consecutive calls.
func gaps(cs []call) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(cs); i++ {
		out = append(out, cs[i].at.Sub(cs[i-1].at))
	}
	return out
}

func get(t *testing.T, tr http.RoundTripper, method, url string, body io.Reader) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.RoundTrip(req)
	if res != nil {
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
	return res, err
}
