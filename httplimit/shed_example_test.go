package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// ExampleShed puts load shedding in front of everything else: at most 100
// requests run, 20 more may wait up to their client's 2 s, 10 slots are
// kept for checkout, prefetches go first, and a full queue takes the excess
// from the tenant holding the most of the service.
func ExampleShed() {
	g, err := overload.New(overload.Config{
		MaxInFlight: 100, Reserve: overload.Reserve{Critical: 10},
		QueueSize: 20, Shedding: overload.Fair, ServiceTime: 50 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	prio, err := httplimit.PriorityByRule([]httplimit.PriorityRule{
		{Match: policy.Match{Methods: []string{"POST"}, Path: "/checkout"}, Priority: overload.Critical},
		{Match: policy.Match{Path: "/prefetch/**"}, Priority: overload.Sheddable},
	}, overload.Default)
	if err != nil {
		log.Fatal(err)
	}
	shed, err := httplimit.Shed(httplimit.ShedConfig{
		Gate: g, Priority: prio, Timeout: 2 * time.Second,
		Tenant: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		log.Fatal(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	// Outermost: before authentication, the rate limiter and the body.
	srv := httptest.NewServer(shed(app))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/home")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output: 200
}
