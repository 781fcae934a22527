package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/policy/policytest"
	"github.com/portero-rl/portero/store/memstore"
)

// Example puts a stacked policy in front of a handler: 2 logins per minute
// per client, 100 requests per minute per client for everything else.
func Example() {
	p, err := policy.New([]policy.Rule{
		{Name: "per-ip", Key: policy.MustParseKey("ip"), Algorithm: portero.SlidingCounter, Limit: portero.MustParseLimit("100/min")},
		{Name: "login", Match: policy.Match{Methods: []string{"POST"}, Path: "/login"},
			Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("2/min")},
	}, policy.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// In a real service use store/memstore or store/redisstore.
	// Now is fixed here so that the output is stable; leave it nil in a service.
	now := func() time.Time { return time.Date(2026, 5, 1, 9, 30, 0, 0, time.UTC) }
	limit, err := httplimit.Middleware(httplimit.Config{Policy: p, Store: &policytest.Store{}, Now: now})
	if err != nil {
		log.Fatal(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "welcome\n") })
	srv := httptest.NewServer(limit(app))
	defer srv.Close()

	for range 3 {
		resp, err := http.Post(srv.URL+"/login", "text/plain", nil)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// Output:
	// 200 "per-ip";r=99;t=61, "login";r=1;t=60
	// 200 "per-ip";r=98;t=91, "login";r=0;t=60
	// 429 "login";r=0;t=60
}

// Example_concurrency limits rates and requests in flight with one policy:
// each client may send 100 requests a minute and run 2 at once, and a
// third waits up to a second for one of its two to end (Queues). The
// RateLimit fields of both kinds come in one response.
func Example_concurrency() {
	store, err := memstore.New(memstore.Config{}) // keeps the counters and the leases
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(context.Background())
	p, err := policy.New([]policy.Rule{
		{Name: "per-ip", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("100/min")},
		{Name: "two-at-a-time", Key: policy.MustParseKey("ip"), Concurrency: portero.ConcurrencyRule{Max: 2}},
	}, policy.Options{})
	if err != nil {
		log.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 5, 1, 9, 30, 0, 0, time.UTC) }
	lim, err := httplimit.New(httplimit.Config{Policy: p, Store: store, Now: now,
		Queues: map[string]overload.Queue{"two-at-a-time": {Size: 10, Timeout: time.Second}}})
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"))
	fmt.Println(rec.Header().Get("RateLimit"))
	// Output:
	// 200 "per-ip";q=100;w=60, "two-at-a-time";q=2;qu="concurrent-requests"
	// "per-ip";r=99;t=60, "two-at-a-time";r=1
}
