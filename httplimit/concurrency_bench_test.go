package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// BenchmarkConcurrency is the middleware's cost per request with a memory
// store: two leases (per API key, over 1024 keys, and the service's), the
// renewal timer started and stopped, the RateLimit members written.
func BenchmarkConcurrency(b *testing.B) {
	store, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close(context.Background())
	c, err := httplimit.NewConcurrency(httplimit.ConcurrencyConfig{
		Rules: []httplimit.ConcurrencyRule{
			{Name: "per-key", Key: policy.MustParseKey("header:X-API-Key"), Max: 1 << 20},
			{Name: "service", Key: policy.MustParseKey("global"), Max: 1 << 20},
		},
		Store: store,
	})
	if err != nil {
		b.Fatal(err)
	}
	app := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	// "bare" is the same loop without the middleware: the request and the
	// recorder; the difference is the middleware's cost.
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", app}, {"two-leases", c.Handler(app)}} {
		b.Run(bc.name, func(b *testing.B) {
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(n.Add(1)) * 7919
				for pb.Next() {
					i++
					r := httptest.NewRequest("GET", "/", nil)
					r.Header.Set("X-API-Key", "k"+strconv.Itoa(i%1024))
					bc.h.ServeHTTP(httptest.NewRecorder(), r)
				}
			})
		})
	}
}
