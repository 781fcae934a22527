package httplimit_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/policy/policytest"
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
