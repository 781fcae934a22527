package httplimit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

// settleStores runs f on the memory store and on a real redis-server.
func settleStores(t *testing.T, f func(t *testing.T, st portero.Store)) {
	t.Run("memory", func(t *testing.T) {
		st, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		f(t, st)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		st, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		f(t, st)
	})
}

// TestCountedAfterResponseBound: a rule that counts only failed logins
// looks before the request and counts after the response, so under
// concurrency it admits at most its limit plus the requests in flight when
// the limit is reached: here L−1 failures counted, then C concurrent
// attempts all admitted (each saw L−1 < L), all failing: L−1+C counted,
// and the next attempt refused.
func TestCountedAfterResponseBound(t *testing.T) {
	const limit, inFlight = 5, 6
	settleStores(t, func(t *testing.T, st portero.Store) {
		failed, _ := policy.ParseStatuses([]string{"401", "403"})
		pol, err := policy.New([]policy.Rule{{Name: "login-failures", Match: policy.Match{Methods: []string{"POST"}, Path: "/login"},
			Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.PerHour(limit), Responses: failed}}, policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var errs []error
		var mu sync.Mutex
		lim, err := httplimit.New(httplimit.Config{Policy: pol, Store: st, OnError: func(_ *http.Request, err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}})
		if err != nil {
			t.Fatal(err)
		}
		var arrived sync.WaitGroup
		gate := make(chan struct{})
		hold := false
		var served sync.Mutex
		srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served.Lock()
			h := hold
			served.Unlock()
			if h {
				arrived.Done()
				<-gate
			}
			if r.URL.Query().Get("password") == "right" {
				w.WriteHeader(http.StatusOK)
				return
			}
			w.WriteHeader(http.StatusUnauthorized)
		})))
		t.Cleanup(srv.Close)
		login := func(password string) int {
			resp, err := http.Post(srv.URL+"/login?password="+password, "text/plain", strings.NewReader(""))
			if err != nil {
				t.Error(err)
				return 0
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		for range 20 {
			if code := login("right"); code != 200 {
				t.Fatalf("a good login got %d: good logins must not count", code)
			}
		}
		for i := range limit - 1 {
			if code := login("wrong"); code != 401 {
				t.Fatalf("failure %d got %d, want 401", i, code)
			}
		}
		served.Lock()
		hold = true
		served.Unlock()
		arrived.Add(inFlight)
		codes := make(chan int, inFlight)
		for range inFlight {
			go func() { codes <- login("wrong") }()
		}
		arrived.Wait() // all in the handler at once: each was admitted
		served.Lock()
		hold = false
		served.Unlock()
		close(gate)
		for range inFlight {
			if code := <-codes; code != 401 {
				t.Errorf("a concurrent attempt got %d, want 401 (admitted)", code)
			}
		}
		if code := login("right"); code != http.StatusTooManyRequests {
			t.Errorf("after %d failures (limit %d): got %d, want 429", limit-1+inFlight, limit, code)
		}
		d, err := st.Peek(context.Background(), pol.Rule("login-failures").StoreRule(), "ip=127.0.0.1/32", time.Now(), 1)
		if err != nil {
			t.Fatal(err)
		}
		// Every failure was counted: L−1+C = 10 > L, so nothing is left,
		// and the bound L + C − 1 holds with equality.
		if d.Allowed || d.Remaining != 0 {
			t.Errorf("after the concurrent failures: %+v, want refused with nothing left", d)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(errs) != 0 {
			t.Errorf("errors: %v", errs)
		}
	})
}

// TestTokenBudget: an LLM API reports its tokens in X-Tokens-Used; the
// rule reserves 100 per request and settles the difference, so a budget of
// 1,000 tokens per API key and hour is spent by what was used.
func TestTokenBudget(t *testing.T) {
	settleStores(t, func(t *testing.T, st portero.Store) {
		cost, _ := policy.ParseCost("response-header:X-Tokens-Used")
		pol, err := policy.New([]policy.Rule{{Name: "tokens", Key: policy.MustParseKey("header:X-API-Key"),
			Algorithm: portero.FixedWindow, Limit: portero.PerHour(1000), Cost: cost, Reserve: 100}}, policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		lim, err := httplimit.New(httplimit.Config{Policy: pol, Store: st})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tokens-Used", r.URL.Query().Get("tokens"))
			io.WriteString(w, "answer")
		})))
		t.Cleanup(srv.Close)
		ask := func(tokens string) *http.Response {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/chat?tokens="+tokens, nil)
			req.Header.Set("X-API-Key", "key-1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		// 10 small answers of 20 tokens: 200 used, 800 left.
		for i := range 10 {
			if resp := ask("20"); resp.StatusCode != 200 {
				t.Fatalf("answer %d: %d", i, resp.StatusCode)
			}
		}
		// The RateLimit field of the next response tells the state before
		// its own settlement: 800 − 100 reserved = 700.
		if got := ask("700").Header.Get("RateLimit"); !strings.HasPrefix(got, `"tokens";r=700;`) {
			t.Errorf("RateLimit = %q, want r=700", got)
		}
		// 900 used: a reservation of 100 still fits, then nothing.
		if resp := ask("500"); resp.StatusCode != 200 {
			t.Fatalf("the last fitting request: %d", resp.StatusCode)
		}
		if resp := ask("1"); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("after overspending the budget: %d, want 429", resp.StatusCode)
		}
	})
}
