package httplimit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/policy/policytest"
)

// clock is a settable clock for the middleware.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func rule(t *testing.T, name, key, limit string, mods ...func(*policy.Rule)) policy.Rule {
	t.Helper()
	r := policy.Rule{Name: name, Key: policy.MustParseKey(key), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit(limit)}
	for _, m := range mods {
		m(&r)
	}
	return r
}

// serve starts a real server on 127.0.0.1 with the middleware in front of a
// handler that counts its calls and reads the body.
func serve(t *testing.T, cfg httplimit.Config, rules ...policy.Rule) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	p, err := policy.New(rules, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy = p
	if cfg.Store == nil {
		cfg.Store = &policytest.Store{}
	}
	mw, err := httplimit.Middleware(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok\n")
	})))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func do(t *testing.T, method, url string, hdr map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// checkSF parses RateLimit and RateLimit-Policy with a Structured Field
// parser and returns name → params.
func checkSF(t *testing.T, h http.Header, field string) map[string]map[string]any {
	t.Helper()
	vals := h.Values(field)
	if len(vals) == 0 {
		t.Fatalf("no %s header", field)
	}
	list, err := httpsfv.UnmarshalList(vals)
	if err != nil {
		t.Fatalf("%s: %q is not a structured-field list: %v", field, vals, err)
	}
	out := map[string]map[string]any{}
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member %v is not an item", field, m)
		}
		name, ok := it.Value.(string)
		if !ok {
			t.Fatalf("%s: policy name %v is not an sf-string", field, it.Value)
		}
		ps := map[string]any{}
		for _, k := range it.Params.Names() {
			ps[k], _ = it.Params.Get(k)
		}
		out[name] = ps
	}
	return out
}

func TestAllowedHeaders(t *testing.T) {
	c := newClock()
	srv, calls := serve(t, httplimit.Config{Now: c.Now, LegacyHeaders: true},
		rule(t, "per-ip", "ip", "10/min"),
		rule(t, "burst", "ip", "5/s burst 10", func(r *policy.Rule) { r.Algorithm = portero.TokenBucket }),
		rule(t, "dark", "ip", "1/min", func(r *policy.Rule) { r.Mode = policy.Shadow }),
	)
	resp, _ := do(t, "GET", srv.URL+"/", nil, "")
	if resp.StatusCode != 200 || calls.Load() != 1 {
		t.Fatalf("status %d calls %d", resp.StatusCode, calls.Load())
	}
	pol := checkSF(t, resp.Header, "RateLimit-Policy")
	if got := fmt.Sprint(pol["per-ip"]); got != "map[q:10 w:60]" {
		t.Errorf("RateLimit-Policy per-ip = %s", got)
	}
	if got := fmt.Sprint(pol["burst"]); got != "map[q:10 w:2]" {
		t.Errorf("RateLimit-Policy burst = %s", got)
	}
	if _, ok := pol["dark"]; ok {
		t.Error("shadow rule announced in RateLimit-Policy")
	}
	cur := checkSF(t, resp.Header, "RateLimit")
	if got := fmt.Sprint(cur["per-ip"]); got != "map[r:9 t:60]" {
		t.Errorf("RateLimit per-ip = %s", got)
	}
	if got := fmt.Sprint(cur["burst"]); got != "map[r:9 t:1]" {
		t.Errorf("RateLimit burst = %s", got)
	}
	// Legacy headers describe the rule closest to exhaustion (per-ip 9/10 vs
	// burst 9/10: the first); Reset is seconds from now.
	if g := resp.Header.Get("X-RateLimit-Limit") + " " + resp.Header.Get("X-RateLimit-Remaining") + " " + resp.Header.Get("X-RateLimit-Reset"); g != "10 9 60" {
		t.Errorf("legacy headers = %q, want 10 9 60", g)
	}
	if resp.Header.Get("Retry-After") != "" {
		t.Error("Retry-After on an allowed response")
	}
}

// TestRefusal: the 429 names the rule that refused, with its own values,
// Retry-After is whole seconds rounded up and not before the effective
// window, and the handler never runs (nor is the body read).
func TestRefusal(t *testing.T) {
	c := newClock()
	c.Add(59*time.Second + 500*time.Millisecond) // 0.5 s before the minute ends
	srv, calls := serve(t, httplimit.Config{Now: c.Now},
		rule(t, "reads", "ip", "100/min"),
		rule(t, "login", "ip", "2/min", func(r *policy.Rule) {
			r.Match = policy.Match{Methods: []string{"POST"}, Path: "/login"}
		}),
	)
	for range 2 {
		if resp, _ := do(t, "POST", srv.URL+"/login", nil, "x"); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	resp, body := do(t, "POST", srv.URL+"/login", nil, "password=hunter2")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	if calls.Load() != 2 {
		t.Errorf("handler ran %d times, want 2", calls.Load())
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1 (0.5 s rounded up)", got)
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q", got)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("Content-Type = %q", got)
	}
	cur := checkSF(t, resp.Header, "RateLimit")
	if len(cur) != 1 || fmt.Sprint(cur["login"]) != "map[r:0 t:1]" {
		t.Errorf("RateLimit = %v, want only login with r=0;t=1", cur)
	}
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if tt := cur["login"]["t"].(int64); int64(ra) < tt {
		t.Errorf("Retry-After %d earlier than the effective window t=%d", ra, tt)
	}
	var p httplimit.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if p.Type != httplimit.ProblemQuotaExceeded || p.Status != 429 || fmt.Sprint(p.ViolatedPolicies) != "[login]" {
		t.Errorf("problem = %+v", p)
	}
	// The refused logins did not consume "reads": 100 − 2 left.
	resp, _ = do(t, "GET", srv.URL+"/", nil, "")
	if got := fmt.Sprint(checkSF(t, resp.Header, "RateLimit")["reads"]); got != "map[r:97 t:1]" {
		t.Errorf("reads after refusal = %s, want r=97", got)
	}
	// After the window the login passes again.
	c.Add(time.Second)
	if resp, _ := do(t, "POST", srv.URL+"/login", nil, "x"); resp.StatusCode != 200 {
		t.Errorf("after window: status %d", resp.StatusCode)
	}
}

// TestRetryAfterRoundsUp: a bucket refilling in 1.2 s answers 2, never 1.
func TestRetryAfterRoundsUp(t *testing.T) {
	c := newClock()
	srv, _ := serve(t, httplimit.Config{Now: c.Now},
		rule(t, "slow", "global", "1/1200ms", func(r *policy.Rule) { r.Algorithm = portero.GCRA }))
	do(t, "GET", srv.URL, nil, "")
	resp, _ := do(t, "GET", srv.URL, nil, "")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("status %d Retry-After %q, want 429 and 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestSpoofedXFF: without trusted proxies, a client that changes
// X-Forwarded-For (and Forwarded) on every request still lands on one key.
func TestSpoofedXFF(t *testing.T) {
	srv, calls := serve(t, httplimit.Config{}, rule(t, "per-ip", "ip", "3/min"))
	codes := ""
	for i := range 6 {
		resp, _ := do(t, "GET", srv.URL, map[string]string{
			"X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i),
			"Forwarded":       fmt.Sprintf("for=198.51.100.%d", i),
			"X-Real-IP":       fmt.Sprintf("192.0.2.%d", i),
		}, "")
		codes += strconv.Itoa(resp.StatusCode) + " "
	}
	if codes != "200 200 200 429 429 429 " || calls.Load() != 3 {
		t.Errorf("codes = %s calls = %d, want three 200 then 429", codes, calls.Load())
	}
}

// TestTrustedProxy: with 127.0.0.1 trusted, the rightmost untrusted address
// of X-Forwarded-For is the key; the leftmost (client-written) is ignored.
func TestTrustedProxy(t *testing.T) {
	trusted, _ := clientip.ParsePrefixes([]string{"127.0.0.0/8", "10.0.0.0/8"})
	srv, _ := serve(t, httplimit.Config{ClientIP: httplimit.ClientIP{TrustedProxies: trusted}},
		rule(t, "per-ip", "ip", "1/min"))
	// Forged leftmost values change, the real client (203.0.113.7) does not.
	r1, _ := do(t, "GET", srv.URL, map[string]string{"X-Forwarded-For": "1.1.1.1, 203.0.113.7, 10.0.0.2"}, "")
	r2, _ := do(t, "GET", srv.URL, map[string]string{"X-Forwarded-For": "8.8.8.8, 203.0.113.7, 10.0.0.2"}, "")
	if r1.StatusCode != 200 || r2.StatusCode != 429 {
		t.Errorf("statuses %d %d, want 200 429", r1.StatusCode, r2.StatusCode)
	}
	// Another client behind the same proxy has its own key.
	r3, _ := do(t, "GET", srv.URL, map[string]string{"X-Forwarded-For": "203.0.113.8, 10.0.0.2"}, "")
	if r3.StatusCode != 200 {
		t.Errorf("other client: status %d", r3.StatusCode)
	}
}

func TestIdentityAndCost(t *testing.T) {
	c := newClock()
	p, _ := policy.New([]policy.Rule{
		rule(t, "per-user", "tenant+user", "2/min"),
		rule(t, "bytes", "ip", "100/min", func(r *policy.Rule) {
			r.Match.Methods = []string{"PUT"}
			r.Cost, _ = policy.ParseCost("content-length")
		}),
	}, policy.Options{})
	l, err := httplimit.New(httplimit.Config{Policy: p, Store: &policytest.Store{}, Now: c.Now, TenantHeader: "X-Tenant"})
	if err != nil {
		t.Fatal(err)
	}
	// Earlier middleware sets the user in the context.
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-Test-User"); u != "" {
				r = r.WithContext(httplimit.WithIdentity(r.Context(), "user", u))
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(auth(l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))))
	defer srv.Close()
	alice := map[string]string{"X-Test-User": "alice", "X-Tenant": "acme"}
	bob := map[string]string{"X-Test-User": "bob", "X-Tenant": "acme"}
	var codes []int
	for _, h := range []map[string]string{alice, alice, alice, bob, nil, nil, nil} {
		resp, _ := do(t, "GET", srv.URL, h, "")
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 429 200 200 200 200]" {
		t.Errorf("codes = %v (no user: rule does not apply)", codes)
	}
	// Cost from the declared body size; the body is never read by the limiter.
	if resp, _ := do(t, "PUT", srv.URL, nil, strings.Repeat("a", 80)); resp.StatusCode != 200 {
		t.Errorf("80 bytes: %d", resp.StatusCode)
	}
	resp, _ := do(t, "PUT", srv.URL, nil, strings.Repeat("a", 30))
	if resp.StatusCode != 429 {
		t.Errorf("80+30 bytes: %d, want 429", resp.StatusCode)
	}
	if pol := checkSF(t, resp.Header, "RateLimit-Policy"); pol["bytes"]["qu"] != "content-bytes" {
		t.Errorf("bytes policy = %v, want qu=content-bytes", pol["bytes"])
	}
	// More than the rule can ever admit at once: a 429 that says it can
	// never pass (the rule, the cost, the maximum), with no Retry-After.
	resp, body := do(t, "PUT", srv.URL, nil, strings.Repeat("a", 101))
	var prob httplimit.Problem
	if err := json.Unmarshal(body, &prob); err != nil {
		t.Fatalf("101 bytes: %s: %v", body, err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "" || prob.Type != httplimit.ProblemQuotaExceeded ||
		prob.Cost != 101 || prob.MaxCost == nil || *prob.MaxCost != 100 || prob.RetryAfter != 0 || !strings.Contains(prob.Detail, `rule "bytes" admits at most 100 content-bytes at once and this request costs 101: it can never pass`) {
		t.Errorf("101 bytes: %d %v %s, want a 429 that can never pass", resp.StatusCode, resp.Header, body)
	}
	// Chunked body of unknown length: 411.
	req, _ := http.NewRequest("PUT", srv.URL, io.MultiReader(strings.NewReader("abc")))
	req.ContentLength = -1
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusLengthRequired {
		t.Errorf("chunked: %d, want 411", r2.StatusCode)
	}
}

func TestStoreFailure(t *testing.T) {
	store := &policytest.Store{}
	store.SetErr(fmt.Errorf("redis: %w", portero.ErrStoreUnavailable))
	var errs atomic.Int64
	open, calls := serve(t, httplimit.Config{Store: store, OnError: func(*http.Request, error) { errs.Add(1) }}, rule(t, "g", "global", "1/min"))
	if resp, _ := do(t, "GET", open.URL, nil, ""); resp.StatusCode != 200 || calls.Load() != 1 || errs.Load() != 1 {
		t.Errorf("fail open: status %d calls %d errors %d", resp.StatusCode, calls.Load(), errs.Load())
	}
	closed, calls := serve(t, httplimit.Config{Store: store, OnStoreError: portero.FailDeny}, rule(t, "g", "global", "1/min"))
	resp, body := do(t, "GET", closed.URL, nil, "")
	if resp.StatusCode != 503 || calls.Load() != 0 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "temporary-reduced-capacity") {
		t.Errorf("fail closed: status %d calls %d body %s, want 503", resp.StatusCode, calls.Load(), body)
	}
	p, _ := policy.New([]policy.Rule{rule(t, "g", "global", "1/min")}, policy.Options{})
	if _, err := httplimit.New(httplimit.Config{Policy: p, Store: store, OnStoreError: portero.FailError}); err == nil {
		t.Error("OnStoreError error accepted: the middleware has no caller to report to")
	}
}

func TestConcurrencyLimit(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	h := httplimit.ConcurrencyLimit(1)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	done := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	resp, _ := do(t, "GET", srv.URL, nil, "")
	close(release)
	if resp.StatusCode != 503 {
		t.Errorf("second request: %d, want 503", resp.StatusCode)
	}
	if code := <-done; code != 200 {
		t.Errorf("first request: %d", code)
	}
}

func TestUpdate(t *testing.T) {
	store := &policytest.Store{}
	p1, _ := policy.New([]policy.Rule{rule(t, "a", "global", "2/min")}, policy.Options{})
	l, _ := httplimit.New(httplimit.Config{Policy: p1, Store: store})
	srv := httptest.NewServer(l.Handler(http.NotFoundHandler()))
	defer srv.Close()
	do(t, "GET", srv.URL, nil, "")
	// Same rule, another added: the counter of "a" survives.
	p2, _ := policy.New([]policy.Rule{rule(t, "a", "global", "2/min"), rule(t, "b", "global", "9/min")}, policy.Options{})
	if err := l.Update(httplimit.Config{Policy: p2, Store: store}); err != nil {
		t.Fatal(err)
	}
	resp, _ := do(t, "GET", srv.URL, nil, "")
	if got := fmt.Sprint(checkSF(t, resp.Header, "RateLimit")["a"]["r"]); got != "0" {
		t.Errorf("a after update: r=%s, want 0", got)
	}
	if err := l.Update(httplimit.Config{Store: store}); err == nil {
		t.Error("Update without policy accepted")
	}
}
