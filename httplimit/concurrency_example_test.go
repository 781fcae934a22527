package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// ExampleNewConcurrency lets each API key run one export at a time and the
// whole service four: the second export of one key is refused with 429
// while the first runs, and the first's response announces both limits.
func ExampleNewConcurrency() {
	// One process; use store/redisstore to share the limits among instances.
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(context.Background())
	c, err := httplimit.NewConcurrency(httplimit.ConcurrencyConfig{
		Rules: []httplimit.ConcurrencyRule{
			{Name: "exports-per-key", Match: policy.Match{Path: "/export"}, Key: policy.MustParseKey("header:X-API-Key"), Max: 1},
			{Name: "service", Key: policy.MustParseKey("global"), Max: 4},
		},
		Store: store,
	})
	if err != nil {
		log.Fatal(err)
	}
	running, finish := make(chan struct{}), make(chan struct{})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(running)
		<-finish // a long export
		io.WriteString(w, "export done\n")
	})
	srv := httptest.NewServer(c.Handler(app))
	defer srv.Close()

	get := func() *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"/export", nil)
		req.Header.Set("X-API-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	first := make(chan *http.Response)
	go func() { first <- get() }()
	<-running
	second := get()
	fmt.Println(second.StatusCode, second.Header.Get("Retry-After"), second.Header.Values("RateLimit"))
	close(finish)
	resp := <-first
	fmt.Println(resp.StatusCode, resp.Header.Values("RateLimit-Policy"))
	fmt.Println(resp.Header.Values("RateLimit"))
	// Output:
	// 429 1 ["exports-per-key";r=0]
	// 200 ["exports-per-key";q=1;qu="concurrent-requests", "service";q=4;qu="concurrent-requests"]
	// ["exports-per-key";r=0, "service";r=3]
}
