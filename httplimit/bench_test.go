package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// discard is a ResponseWriter that keeps only the status and the header
// map, so that benchmarks measure the middleware and not a recorder's
// growing body buffer.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }

// benchPolicy is two stacked rules, per client and global, as in a typical
// gateway; perIP is the per-client limit.
func benchPolicy(b *testing.B, perIP string) *policy.Policy {
	b.Helper()
	p, err := policy.New([]policy.Rule{
		{Name: "per-ip", Key: policy.MustParseKey("ip"), Algorithm: portero.GCRA, Limit: portero.MustParseLimit(perIP)},
		{Name: "global", Key: policy.MustParseKey("global"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("1000000000/s")},
	}, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// defaultPolicy is the shape of the embedded default configuration: a
// per-client token bucket, a login rule that GET requests do not match, and
// a global sliding counter (with limits high enough to allow the traffic).
func defaultPolicy(b *testing.B) *policy.Policy {
	b.Helper()
	p, err := policy.New([]policy.Rule{
		{Name: "per-client", Key: policy.MustParseKey("ip"), Algorithm: portero.TokenBucket, Limit: portero.MustParseLimit("1000000/s burst 1000000")},
		{Name: "login", Match: policy.Match{Methods: []string{"POST"}, Path: "/login"}, Key: policy.MustParseKey("ip"),
			Algorithm: portero.SlidingCounter, Limit: portero.MustParseLimit("3/min")},
		{Name: "global", Key: policy.MustParseKey("global"), Algorithm: portero.SlidingCounter, Limit: portero.MustParseLimit("1000000000/s")},
	}, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

type benchCase struct {
	name string
	p    *policy.Policy // nil: the handler alone, without the middleware
	want int            // the status every request must get
}

func benchCases(b *testing.B) []benchCase {
	return []benchCase{
		{"handler-only", nil, http.StatusOK},
		{"allowed", benchPolicy(b, "1000000/s"), http.StatusOK},
		{"refused", benchPolicy(b, "1/h"), http.StatusTooManyRequests},
		{"default-policy", defaultPolicy(b), http.StatusOK},
	}
}

func benchHandler(b *testing.B, p *policy.Policy) http.Handler {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	if p == nil {
		return ok
	}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close(b.Context()) })
	l, err := httplimit.New(httplimit.Config{Policy: p, Store: store})
	if err != nil {
		b.Fatal(err)
	}
	return l.Handler(ok)
}

// serveOnce runs one request; the status is checked after the loop.
func serveOnce(h http.Handler, w *discard, r *http.Request) {
	clear(w.h)
	w.code = http.StatusOK
	h.ServeHTTP(w, r)
}

// BenchmarkMiddleware measures the cost of one decision with the memory
// store and two stacked rules, without a network, one request after
// another: handler-only is the no-op handler alone, allowed the middleware
// in front of it (the difference is the decision overhead), refused a
// client over its limit (the handler never runs), default-policy the
// embedded configuration's three rules. Clients spread over 250 addresses.
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range benchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			h := benchHandler(b, bc.p)
			reqs := make([]*http.Request, 250)
			for i := range reqs {
				reqs[i] = httptest.NewRequest("GET", "/items/1", nil)
				reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i) + ".1:1234"
			}
			w := &discard{h: http.Header{}}
			for _, r := range reqs { // warm up: the refused clients use their one request
				serveOnce(h, w, r)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				serveOnce(h, w, reqs[i])
				if i++; i == len(reqs) {
					i = 0
				}
			}
			if w.code != bc.want {
				b.Fatalf("status %d, want %d", w.code, bc.want)
			}
		})
	}
}

// BenchmarkMiddlewareParallel is BenchmarkMiddleware with requests from
// every core at once (RunParallel), so that it includes the contention on
// the store's shards and on the global counter.
func BenchmarkMiddlewareParallel(b *testing.B) {
	for _, bc := range benchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			h := benchHandler(b, bc.p)
			var n atomic.Int64
			var bad atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/items/1", nil)
				r.RemoteAddr = "10.1." + strconv.Itoa(int(n.Add(1)%250)) + ".1:1234"
				w := &discard{h: http.Header{}}
				serveOnce(h, w, r) // warm up: a refused client uses its one request
				ran := false
				for pb.Next() {
					serveOnce(h, w, r)
					ran = true
				}
				if ran && w.code != bc.want {
					bad.Store(int64(w.code))
				}
			})
			if c := bad.Load(); c != 0 {
				b.Fatalf("status %d, want %d", c, bc.want)
			}
		})
	}
}
