package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

func leaseStore(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func concurrency(t *testing.T, cfg httplimit.ConcurrencyConfig) *httplimit.Concurrency {
	t.Helper()
	c, err := httplimit.NewConcurrency(cfg)
	if err != nil {
		t.Fatalf("NewConcurrency = %v", err)
	}
	return c
}

// holdGate is a handler that holds each request until released.
type holdGate struct {
	entered chan struct{}
	release chan struct{}
}

func newHoldGate() *holdGate {
	return &holdGate{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *holdGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.entered <- struct{}{}
	<-g.release
	io.WriteString(w, "done\n")
}

// goGet sends a GET in the background and returns a channel with its status
// (0 on a transport error).
func goGet(url string, hdr map[string]string) <-chan int {
	out := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out <- resp.StatusCode
	}()
	return out
}

// TestConcurrencyClientAndService: a client over its own limit gets 429
// (quota-exceeded), a request over the service's limit 503
// (temporary-reduced-capacity), both with Retry-After, problem+json and the
// RateLimit fields with qu="concurrent-requests"; an admitted request
// carries every rule's member; every slot comes back when the requests end.
func TestConcurrencyClientAndService(t *testing.T) {
	store := leaseStore(t)
	perKey := httplimit.ConcurrencyRule{Name: "per-key", Key: policy.MustParseKey("header:X-API-Key"), Max: 2}
	global := httplimit.ConcurrencyRule{Name: "service", Key: policy.MustParseKey("global"), Max: 3}
	c := concurrency(t, httplimit.ConcurrencyConfig{Rules: []httplimit.ConcurrencyRule{perKey, global}, Store: store})
	g := newHoldGate()
	srv := httptest.NewServer(c.Handler(g))
	defer srv.Close()
	a, b := map[string]string{"X-API-Key": "a"}, map[string]string{"X-API-Key": "b"}

	var pending []<-chan int
	pending = append(pending, goGet(srv.URL, a))
	<-g.entered
	// The second of client a is admitted: look at its headers while it runs.
	type result struct {
		resp *http.Response
		err  error
	}
	second := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-API-Key", "a")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		second <- result{resp, err}
	}()
	<-g.entered

	resp, body := do(t, "GET", srv.URL, a, "")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("third of client a: %d, Retry-After %q, %q, want 429, 1, problem+json", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
	}
	var p httplimit.Problem
	if err := json.Unmarshal(body, &p); err != nil || p.Type != httplimit.ProblemQuotaExceeded || fmt.Sprint(p.ViolatedPolicies) != "[per-key]" || p.Status != 429 {
		t.Errorf("429 body %s (%v)", body, err)
	}
	if pol := checkSF(t, resp.Header, "RateLimit-Policy")["per-key"]; fmt.Sprintf("%v %v", pol["q"], pol["qu"]) != "2 concurrent-requests" {
		t.Errorf("429 RateLimit-Policy = %q", resp.Header.Values("RateLimit-Policy"))
	}
	if rl := checkSF(t, resp.Header, "RateLimit"); fmt.Sprint(rl["per-key"]["r"]) != "0" || len(rl) != 1 {
		t.Errorf("429 RateLimit = %q, want only per-key with r=0", resp.Header.Values("RateLimit"))
	}

	pending = append(pending, goGet(srv.URL, b)) // b's first: the service's third slot
	<-g.entered
	resp, body = do(t, "GET", srv.URL, map[string]string{"X-API-Key": "c"}, "")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "temporary-reduced-capacity") {
		t.Errorf("client c over the service's limit: %d %s, want 503 temporary-reduced-capacity", resp.StatusCode, body)
	}
	if rl := checkSF(t, resp.Header, "RateLimit"); fmt.Sprint(rl["service"]["r"]) != "0" {
		t.Errorf("503 RateLimit = %q", resp.Header.Values("RateLimit"))
	}

	close(g.release)
	for _, ch := range pending {
		if code := <-ch; code != 200 {
			t.Errorf("admitted request: %d", code)
		}
	}
	sr := <-second
	if sr.err != nil {
		t.Fatal(sr.err)
	}
	pol := checkSF(t, sr.resp.Header, "RateLimit-Policy")
	rl := checkSF(t, sr.resp.Header, "RateLimit")
	if fmt.Sprintf("%v %v %v", pol["per-key"]["q"], pol["service"]["q"], pol["service"]["qu"]) != "2 3 concurrent-requests" ||
		fmt.Sprint(rl["per-key"]["r"], rl["service"]["r"]) != "0 1" {
		t.Errorf("admitted: RateLimit-Policy %q, RateLimit %q; want q=2 and q=3, r=0 and r=1", sr.resp.Header.Values("RateLimit-Policy"), sr.resp.Header.Values("RateLimit"))
	}
	// Everything is back: three at once for three clients.
	g2 := newHoldGate()
	srv2 := httptest.NewServer(c.Handler(g2))
	defer srv2.Close()
	chs := []<-chan int{goGet(srv2.URL, a), goGet(srv2.URL, a), goGet(srv2.URL, b)}
	for range chs {
		<-g2.entered
	}
	close(g2.release)
	for _, ch := range chs {
		if code := <-ch; code != 200 {
			t.Errorf("after every request ended: %d, want 200", code)
		}
	}
}

// probe reports whether the one slot of rule under key is free, taking and
// releasing it.
func probe(t *testing.T, s portero.LeaseStore, rule portero.ConcurrencyRule, key string) bool {
	t.Helper()
	l, d, err := s.Acquire(context.Background(), time.Now(), rule, key)
	if err != nil {
		t.Fatal(err)
	}
	if l != nil {
		l.Release(context.Background())
	}
	return d.Allowed
}

// waitFree waits until the slot is free: the request has ended, on a real
// server whose goroutines finish in their own time.
func waitFree(t *testing.T, s portero.LeaseStore, rule portero.ConcurrencyRule, key, how string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !probe(t, s, rule, key); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the slot was not released within 10 s", how)
		}
	}
}

// ending is a way a request can end: its handler signals entered, then
// waits for goOn (closed once the test has seen the slot taken) before it
// ends its own way; its client waits for goOn before it does its part.
type ending struct {
	name    string
	handler func(entered chan<- struct{}, goOn <-chan struct{}) http.Handler
	wrap    func(http.Handler) http.Handler // around the middleware; nil for none
	client  func(t *testing.T, url string, goOn <-chan struct{})
}

// endings are the ways a request can end on a real loopback server; the
// last keeps its hijacked connection open, handing it over on hijacked.
func endings(t *testing.T, hijacked chan<- net.Conn) []ending {
	get := func(t *testing.T, url string, _ <-chan struct{}) { <-goGet(url, nil) }
	return []ending{
		{name: "success", client: get, handler: func(entered chan<- struct{}, goOn <-chan struct{}) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { entered <- struct{}{}; <-goOn })
		}},
		{name: "error status", client: get, handler: func(entered chan<- struct{}, goOn <-chan struct{}) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-goOn
				http.Error(w, "broken", 500)
			})
		}},
		{name: "panic", client: get, handler: func(entered chan<- struct{}, goOn <-chan struct{}) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-goOn
				panic("handler bug")
			})
		}},
		{name: "client gone", handler: func(entered chan<- struct{}, _ <-chan struct{}) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-r.Context().Done() // the server cancels it when the client hangs up
			})
		}, client: func(t *testing.T, url string, goOn <-chan struct{}) {
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			errc := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			<-goOn
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled request: %v", err)
			}
		}},
		{name: "timeout handler", wrap: func(h http.Handler) http.Handler {
			return http.TimeoutHandler(h, 50*time.Millisecond, "too slow")
		}, handler: func(entered chan<- struct{}, goOn <-chan struct{}) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-goOn
				<-r.Context().Done() // TimeoutHandler cancels it at 50 ms
			})
		}, client: func(t *testing.T, url string, _ <-chan struct{}) {
			resp, body := do(t, "GET", url, nil, "")
			if resp.StatusCode != 503 || string(body) != "too slow" {
				t.Errorf("timed out: %d %q, want TimeoutHandler's 503", resp.StatusCode, body)
			}
		}},
		{name: "hijacked and closed", client: get, handler: func(entered chan<- struct{}, goOn <-chan struct{}) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-goOn
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("Hijack = %v", err)
					return
				}
				buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
				buf.Flush()
				conn.Close()
			})
		}},
		{name: "hijacked and kept open", handler: func(entered chan<- struct{}, goOn <-chan struct{}) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-goOn
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("Hijack = %v", err)
					return
				}
				buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
				buf.Flush()
				hijacked <- conn // a websocket-like stream lives on after the handler returns
			})
		}, client: func(t *testing.T, url string, _ <-chan struct{}) {
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "echo")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("upgrade: %v", err)
				return
			}
			if resp.StatusCode != 101 {
				t.Errorf("upgrade: status %d", resp.StatusCode)
			}
			resp.Body.Close()
		}},
	}
}

// TestConcurrencyReleasedHoweverTheRequestEnds: one slot, and for each way a
// request can end on a real loopback server — success, an error status, a
// panic, a client that goes away, http.TimeoutHandler giving up, a hijacked
// connection (closed, or kept open after the handler returns) — the slot is
// held while the handler runs and free once it has returned.
func TestConcurrencyReleasedHoweverTheRequestEnds(t *testing.T) {
	store := leaseStore(t)
	const key = "global=*"
	hijacked := make(chan net.Conn, 1)
	for i, cs := range endings(t, hijacked) {
		t.Run(cs.name, func(t *testing.T) {
			// A rule of its own, so that a leak fails this case only.
			rule := portero.ConcurrencyRule{Name: fmt.Sprint("one-", i), Max: 1}
			c := concurrency(t, httplimit.ConcurrencyConfig{
				Rules: []httplimit.ConcurrencyRule{{Name: rule.Name, Key: policy.MustParseKey("global"), Max: 1}},
				Store: store,
			})
			entered, goOn := make(chan struct{}, 1), make(chan struct{})
			h := c.Handler(cs.handler(entered, goOn))
			if cs.wrap != nil {
				h = cs.wrap(h)
			}
			srv := httptest.NewUnstartedServer(h)
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic's stack
			srv.Start()
			defer srv.Close()
			clientDone := make(chan struct{})
			go func() {
				defer close(clientDone)
				cs.client(t, srv.URL, goOn)
			}()
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the handler was not called within 10 s")
			}
			if probe(t, store, rule, key) {
				t.Fatalf("the slot is free while the handler runs")
			}
			close(goOn)
			<-clientDone
			waitFree(t, store, rule, key, cs.name)
		})
	}
	select {
	case conn := <-hijacked:
		// Still open after the handler returned, with its slot given back.
		if _, err := conn.Write([]byte("still here")); err != nil {
			t.Errorf("the hijacked connection: %v", err)
		}
		conn.Close()
	default:
		t.Error("the hijacking handler did not hand over its connection")
	}
}

// TestConcurrencyRenews: a request that runs for longer than its lease's
// TTL keeps its slot, since the middleware renews it every TTL/3 (virtual
// time); a lease that nobody renews is gone after the TTL.
func TestConcurrencyRenews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New(memstore.Config{Now: time.Now, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		rule := portero.ConcurrencyRule{Name: "slow", Max: 1, TTL: time.Second}
		c := concurrency(t, httplimit.ConcurrencyConfig{
			Rules: []httplimit.ConcurrencyRule{{Name: "slow", Key: policy.MustParseKey("global"), Max: 1, TTL: time.Second}},
			Store: store,
		})
		var free []bool
		h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for range 10 { // 10 s of work, ten lease lifetimes
				time.Sleep(time.Second)
				free = append(free, probe(t, store, rule, "global=*"))
			}
		}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		if fmt.Sprint(free) != fmt.Sprint(make([]bool, 10)) {
			t.Errorf("slot free during the request at each second: %v, want never", free)
		}
		if !probe(t, store, rule, "global=*") {
			t.Error("slot still taken after the request")
		}
		// The control: without renewals the lease lapses after its TTL.
		l, _, _ := store.Acquire(context.Background(), time.Now(), rule, "global=*")
		time.Sleep(time.Second)
		if !probe(t, store, rule, "global=*") {
			t.Error("an unrenewed lease still holds its slot after the TTL")
		}
		if err := l.Renew(context.Background(), time.Now()); !errors.Is(err, portero.ErrLeaseLost) {
			t.Errorf("Renew after the TTL = %v, want ErrLeaseLost", err)
		}
	})
}

// failingLeases is a LeaseStore whose backend is down: every Acquire
// fails with an error and no decision, as redisstore's does while Redis
// is down.
type failingLeases struct{}

func (failingLeases) Acquire(context.Context, time.Time, portero.ConcurrencyRule, string) (portero.Lease, portero.Decision, error) {
	return nil, portero.Decision{}, fmt.Errorf("test: %w", portero.ErrStoreUnavailable)
}

// TestConcurrencyStoreDown: when the store fails under deny, the request is
// refused with 503 (never let through uncounted, never blamed on the
// client), and OnError hears of it.
func TestConcurrencyStoreDown(t *testing.T) {
	var mu sync.Mutex
	var errs []error
	c := concurrency(t, httplimit.ConcurrencyConfig{
		Rules:        []httplimit.ConcurrencyRule{{Name: "per-ip", Key: policy.MustParseKey("ip"), Max: 5}},
		Store:        failingLeases{},
		OnError:      func(_ *http.Request, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
		OnStoreError: portero.FailDeny,
	})
	called := false
	srv := httptest.NewServer(c.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true })))
	defer srv.Close()
	resp, body := do(t, "GET", srv.URL, nil, "")
	if resp.StatusCode != 503 || called || !strings.Contains(string(body), "temporary-reduced-capacity") {
		t.Errorf("store down: %d, handler called %v, %s; want 503 and no call", resp.StatusCode, called, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || !errors.Is(errs[0], portero.ErrStoreUnavailable) {
		t.Errorf("OnError got %v", errs)
	}
}

// TestConcurrencyZeroFailurePolicy: an empty OnStoreError means allow, as
// for every door (the engine decides it): a failing store lets the request
// through without a lease.
func TestConcurrencyZeroFailurePolicy(t *testing.T) {
	c := concurrency(t, httplimit.ConcurrencyConfig{
		Rules: []httplimit.ConcurrencyRule{{Name: "per-ip", Key: policy.MustParseKey("ip"), Max: 5}},
		Store: failingLeases{},
	})
	srv := httptest.NewServer(c.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	if resp, body := do(t, "GET", srv.URL, nil, ""); resp.StatusCode != 200 {
		t.Errorf("store down, no failure policy given: %d %s, want 200 (allow)", resp.StatusCode, body)
	}
}

// TestConcurrencyStackedRefusalReleases: when a later rule refuses, the
// leases of the earlier ones are given back (all or nothing).
func TestConcurrencyStackedRefusalReleases(t *testing.T) {
	store := leaseStore(t)
	c := concurrency(t, httplimit.ConcurrencyConfig{
		Rules: []httplimit.ConcurrencyRule{
			{Name: "per-tenant", Key: policy.MustParseKey("tenant"), Max: 5},
			{Name: "export", Match: policy.Match{Path: "/export"}, Key: policy.MustParseKey("route"), Max: 1},
		},
		Store:        store,
		TenantHeader: "X-Tenant",
	})
	g := newHoldGate()
	srv := httptest.NewServer(c.Handler(g))
	defer srv.Close()
	first := goGet(srv.URL+"/export", map[string]string{"X-Tenant": "acme"})
	<-g.entered
	resp, _ := do(t, "GET", srv.URL+"/export", map[string]string{"X-Tenant": "acme"}, "")
	if resp.StatusCode != 503 {
		t.Errorf("second export: %d, want 503 (a route's limit is the service's)", resp.StatusCode)
	}
	tenant := portero.ConcurrencyRule{Name: "per-tenant", Max: 5}
	l, d, _ := store.Acquire(context.Background(), time.Now(), tenant, "tenant=acme")
	if d.Remaining != 3 { // 5, minus the export in flight, minus this probe
		t.Errorf("tenant slots free after a refused export: Remaining %d, want 3 (the refused request's lease given back)", d.Remaining)
	}
	l.Release(context.Background())
	close(g.release)
	<-first
}

func TestConcurrencyConfigErrors(t *testing.T) {
	store := leaseStore(t)
	global := policy.MustParseKey("global")
	for _, c := range []struct {
		name string
		cfg  httplimit.ConcurrencyConfig
		want string
	}{
		{"no store", httplimit.ConcurrencyConfig{}, "Store is required"},
		{"bad name", httplimit.ConcurrencyConfig{Store: store, Rules: []httplimit.ConcurrencyRule{{Name: "a b", Key: global, Max: 1}}}, "rules[0]"},
		{"twice", httplimit.ConcurrencyConfig{Store: store, Rules: []httplimit.ConcurrencyRule{{Name: "a", Key: global, Max: 1}, {Name: "a", Key: global, Max: 1}}}, "rules[1] (a): name already used by rules[0]"},
		{"no key", httplimit.ConcurrencyConfig{Store: store, Rules: []httplimit.ConcurrencyRule{{Name: "a", Max: 1}}}, "key: required"},
		{"max 0", httplimit.ConcurrencyConfig{Store: store, Rules: []httplimit.ConcurrencyRule{{Name: "a", Key: global}}}, "max 0"},
		{"short ttl", httplimit.ConcurrencyConfig{Store: store, Rules: []httplimit.ConcurrencyRule{{Name: "a", Key: global, Max: 1, TTL: time.Microsecond}}}, "ttl 1µs"},
		{"bad match", httplimit.ConcurrencyConfig{Store: store, Rules: []httplimit.ConcurrencyRule{{Name: "a", Key: global, Max: 1, Match: policy.Match{Methods: []string{"get"}}}}}, "match: methods[0]"},
	} {
		_, err := httplimit.NewConcurrency(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewConcurrency = %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestConcurrencyUpdate: a reload that lowers Max keeps the requests in
// flight and their leases; new requests are admitted once fewer than the
// new Max are held.
func TestConcurrencyUpdate(t *testing.T) {
	store := leaseStore(t)
	cfg := func(n int64) httplimit.ConcurrencyConfig {
		return httplimit.ConcurrencyConfig{Store: store, Rules: []httplimit.ConcurrencyRule{{Name: "g", Key: policy.MustParseKey("global"), Max: n}}}
	}
	c := concurrency(t, cfg(3))
	g := newHoldGate()
	srv := httptest.NewServer(c.Handler(g))
	defer srv.Close()
	a, b := goGet(srv.URL, nil), goGet(srv.URL, nil)
	<-g.entered
	<-g.entered
	if err := c.Update(cfg(2)); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(httplimit.ConcurrencyConfig{}); err == nil {
		t.Error("Update without a store accepted")
	}
	if resp, _ := do(t, "GET", srv.URL, nil, ""); resp.StatusCode != 503 {
		t.Errorf("with 2 in flight under the new max 2: %d, want 503", resp.StatusCode)
	}
	close(g.release)
	if <-a != 200 || <-b != 200 {
		t.Error("requests in flight across the update did not finish")
	}
}

// The process-wide cap is a Gate (the one in-flight mechanism): over it,
// 503 with Retry-After and no RateLimit fields, since it is the service's
// capacity, not a client's quota.
func TestConcurrencyLimitIsAGate(t *testing.T) {
	g := newHoldGate()
	srv := httptest.NewServer(httplimit.ConcurrencyLimit(1)(g))
	defer srv.Close()
	defer close(g.release)
	first := goGet(srv.URL, nil)
	<-g.entered
	resp, body := do(t, "GET", srv.URL, nil, "")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "temporary-reduced-capacity") {
		t.Errorf("over the cap: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if v := resp.Header.Values("RateLimit-Policy"); len(v) != 0 {
		t.Errorf("RateLimit-Policy = %q, want none", v)
	}
	g.release <- struct{}{}
	if code := <-first; code != 200 {
		t.Errorf("the admitted request: %d", code)
	}
}
