package client_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/portero-rl/portero/client"
)

// A server that says "429, come back in 1 second" once, then answers.
func ExampleNewClient() {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls++; calls == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	c, err := client.NewClient(client.Config{
		Rand: rand.NewPCG(1, 2), // seeded, so the jitter after Retry-After is reproducible
		Hooks: client.Hooks{OnWait: func(w client.Wait) {
			fmt.Printf("retry %d: waiting %v = %v + %v jitter (%v, status %d)\n",
				w.Retry, w.Duration.Round(time.Millisecond), w.Duration-w.Jitter, w.Jitter.Round(time.Millisecond), w.Reason, w.Status)
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, string(body), "after", calls, "attempts")
	// Output:
	// retry 1: waiting 1.676s = 1s + 676ms jitter (retry-after, status 429)
	// 200 hello after 2 attempts
}

// A server that asks for an hour: the client does not wait that long inside
// one request, and does not retry early either.
func ExampleRetryAfterError() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()

	c, err := client.NewClient(client.Config{}) // MaxRetryAfter: 30 s
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Get(srv.URL)
	var rae *client.RetryAfterError
	if errors.As(err, &rae) {
		fmt.Println(rae.Response.StatusCode, "come back in", rae.Wait, "- the cap is", rae.Max)
	}
	_, err = c.Get(srv.URL) // the host is held for the whole hour
	fmt.Println(errors.Is(err, client.ErrBudgetExceeded))
	// Output:
	// 429 come back in 1h0m0s - the cap is 30s
	// true
}

func ExampleParseRetryAfter() {
	date := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC) // the response's Date
	for _, v := range []string{"120", "Fri, 01 May 2026 12:00:30 GMT", "1.5"} {
		d, ok := client.ParseRetryAfter(v, date)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 30s true
	// 0s false
}

func ExampleBackoff() {
	// Retry n (from 1) waits uniformly in [0, min(cap, base·2^(n−1))).
	for n := 1; n <= 6; n++ {
		fmt.Print(client.Backoff(n, 500*time.Millisecond, 10*time.Second), " ")
	}
	fmt.Println()
	// Output: 500ms 1s 2s 4s 8s 10s
}

func ExampleParsePolicies() {
	ps, _ := client.ParsePolicies([]string{`"burst";q=100;w=60, "daily";q=1000;w=86400`})
	ls, _ := client.ParseLimits([]string{`"burst";r=7;t=12`})
	for _, p := range ps {
		fmt.Printf("%s: %d %s per %v\n", p.Name, p.Quota, p.Unit, p.Window)
	}
	fmt.Printf("%s: %d left within %v\n", ls[0].Name, ls[0].Remaining, ls[0].Window)
	// Output:
	// burst: 100 requests per 1m0s
	// daily: 1000 requests per 24h0m0s
	// burst: 7 left within 12s
}
