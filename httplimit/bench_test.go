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

// BenchmarkMiddleware measures the decision overhead of the middleware with
// the memory store and two stacked rules, without a network: allowed
// requests (many clients) and refused ones (one client over its limit).
func BenchmarkMiddleware(b *testing.B) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close(b.Context())
	p, err := policy.New([]policy.Rule{
		{Name: "per-ip", Key: policy.MustParseKey("ip"), Algorithm: portero.GCRA, Limit: portero.MustParseLimit("1000000/s")},
		{Name: "global", Key: policy.MustParseKey("global"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("1000000000/s")},
	}, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	refuse, _ := policy.New([]policy.Rule{
		{Name: "tiny", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("1/h")},
	}, policy.Options{})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for _, bc := range []struct {
		name string
		p    *policy.Policy
	}{{"allowed", p}, {"refused", refuse}} {
		b.Run(bc.name, func(b *testing.B) {
			h := mustLimiter(b, bc.p, store).Handler(ok)
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/items/1", nil)
				i := n.Add(1)
				r.RemoteAddr = "10.0." + strconv.Itoa(int(i%250)) + ".1:1234"
				w := httptest.NewRecorder()
				for pb.Next() {
					h.ServeHTTP(w, r)
					clear(w.Header())
				}
			})
		})
	}
}

func mustLimiter(b *testing.B, p *policy.Policy, s portero.Store) *httplimit.Limiter {
	l, err := httplimit.New(httplimit.Config{Policy: p, Store: s})
	if err != nil {
		b.Fatal(err)
	}
	return l
}
