package checkapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/httpanswer"
	"github.com/portero-rl/portero/policy/policytest"
	"github.com/portero-rl/portero/store/memstore"
)

const examples = "../../examples/envoy/config"

var t0 = time.Unix(1_800_000_000, 100_000_000)

type fixture struct {
	srv   *httptest.Server
	store portero.Store
}

// setup is what a fixture differs by: the store (a memory store when nil),
// the engines' failure policies (FailError and FailAllow when empty, the
// rls command's defaults), and the rest of the Config.
type setup struct {
	store                portero.Store
	onError, authOnError portero.FailurePolicy
	cfg                  func(*Config)
}

// doorConfig returns a Config over st whose compiler has the examples'
// limits and whose engines have the given failure policies.
func doorConfig(t testing.TB, st portero.Store, onError, authOnError portero.FailurePolicy) Config {
	t.Helper()
	lim, err := envoyconf.Load(examples, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if onError == "" {
		onError = portero.FailError
	}
	if authOnError == "" {
		authOnError = portero.FailAllow
	}
	eng, err := engine.New(engine.Options{Store: st, OnError: onError})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := engine.New(engine.Options{Store: st, OnError: authOnError})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Compiler: descriptor.NewCompiler(lim, descriptor.Options{}), Engine: eng, AuthEngine: auth,
		Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)}
}

func newFixture(t *testing.T, mod func(*Config)) *fixture { return newFixtureWith(t, setup{cfg: mod}) }

func newFixtureWith(t *testing.T, s setup) *fixture {
	t.Helper()
	st := s.store
	if st == nil {
		ms, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ms.Close(context.Background()) })
		st = ms
	}
	cfg := doorConfig(t, st, s.onError, s.authOnError)
	if s.cfg != nil {
		s.cfg(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{srv: srv, store: st}
}

func (f *fixture) post(t *testing.T, body string) (*http.Response, CheckResponse, string) {
	t.Helper()
	resp, err := http.Post(f.srv.URL+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out CheckResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("response %s: %v", raw, err)
		}
	}
	return resp, out, string(raw)
}

func TestCheckDomain(t *testing.T) {
	f := newFixture(t, nil)
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`
	for i := 1; i <= 10; i++ {
		resp, out, raw := f.post(t, body)
		if resp.StatusCode != 200 || !out.Allowed || out.Remaining != int64(10-i) || out.Rule != "edge.remote_address" || out.Limit != 10 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, raw)
		}
		if out.ResetAfter != 0.9 || !out.Descriptors[0].Counted || out.Descriptors[0].Algorithm != "fixed-window" {
			t.Fatalf("request %d: %s", i, raw)
		}
	}
	resp, out, raw := f.post(t, body)
	if resp.StatusCode != 200 || out.Allowed || out.Code != "OVER_LIMIT" || out.RetryAfter != 0.9 || out.Remaining != 0 {
		t.Fatalf("11th: %d %s", resp.StatusCode, raw)
	}
	if resp.Header.Get("Retry-After") != "1" || resp.Header.Get("RateLimit") != `"edge.remote_address";r=0;t=1` || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers: %v", resp.Header)
	}
	// cost and check-only.
	resp, out, raw = f.post(t, `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.2"}]}],"cost":4}`)
	if !out.Allowed || out.Remaining != 6 {
		t.Fatalf("cost 4: %s", raw)
	}
	_, out, raw = f.post(t, `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.2"}],"hits_addend":0}]}`)
	if !out.Allowed || out.Remaining != 6 || out.Descriptors[0].Counted {
		t.Fatalf("check-only: %s", raw)
	}
	// A limit override and no match.
	_, out, raw = f.post(t, `{"domain":"edge","descriptors":[{"entries":[{"key":"x","value":"y"}],"limit":{"requests_per_unit":1,"unit":"hour"}},{"entries":[{"key":"none","value":"z"}]}]}`)
	if !out.Allowed || out.Rule != "edge.x" || out.Descriptors[1].Rule != "" || out.Descriptors[1].Code != "OK" {
		t.Fatalf("override: %s", raw)
	}
	_ = resp
}

func TestCheckBadInput(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxBody = 512 })
	tests := []struct {
		name, body string
		status     int
		detail     string
	}{
		{"malformed", `{"domain":`, 400, "malformed JSON"},
		{"unknown field", `{"domain":"edge","descriptor":[]}`, 400, `unknown field \"descriptor`},
		{"two values", `{"domain":"edge"} {}`, 400, "more than one value"},
		{"empty", `{}`, 400, "give domain and descriptors"},
		{"no descriptors", `{"domain":"edge"}`, 400, "at least one descriptor"},
		{"empty key", `{"domain":"edge","descriptors":[{"entries":[{"key":"","value":"v"}]}]}`, 400, "empty key"},
		{"unknown domain", `{"domain":"nope","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, 404, `unknown domain \"nope`},
		{"bad unit", `{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":"fortnight"}}]}`, 400, "invalid unit"},
		{"negative cost", `{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}]}],"cost":-1}`, 400, "cost -1"},
		{"huge hits", `{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":99999999999}]}`, 400, "hits_addend"},
		{"oversized", `{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"` + strings.Repeat("v", 600) + `"}]}]}`, 413, "larger than 512 bytes"},
		{"policy", `{"policy":"p","key":"k"}`, 400, `unknown field \"policy`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, _, raw := f.post(t, tt.body)
			if resp.StatusCode != tt.status || !strings.Contains(raw, tt.detail) {
				t.Errorf("status %d body %s, want %d containing %q", resp.StatusCode, raw, tt.status, tt.detail)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q", ct)
			}
		})
	}
	resp, err := http.Get(f.srv.URL + "/v1/check")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/check = %d", resp.StatusCode)
	}
	resp, err = http.Post(f.srv.URL+"/v1/check", "text/plain", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 415 {
		t.Errorf("text/plain = %d, want 415", resp.StatusCode)
	}
}

func TestCheckStoreFailure(t *testing.T) {
	for _, tt := range []struct {
		p       portero.FailurePolicy
		status  int
		allowed bool
	}{{portero.FailError, 503, false}, {portero.FailAllow, 200, true}, {portero.FailDeny, 200, false}, {portero.FailLocal, 200, true}} {
		t.Run(tt.p.String(), func(t *testing.T) {
			st := &policytest.Store{}
			st.SetErr(fmt.Errorf("down: %w", portero.ErrStoreUnavailable))
			f := newFixtureWith(t, setup{store: st, onError: tt.p})
			resp, out, raw := f.post(t, `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1"}]}]}`)
			if resp.StatusCode != tt.status || (tt.status == 200 && (out.Allowed != tt.allowed || out.Degraded == "")) {
				t.Errorf("%d %s", resp.StatusCode, raw)
			}
			if tt.status == 503 && resp.Header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		})
	}
}

func authGet(t *testing.T, url string, hdr map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestAuthEndpoint(t *testing.T) {
	f := newFixture(t, nil)
	// Traefik: X-Forwarded-* from a trusted (loopback) proxy; refusals are 429.
	traefik := map[string]string{"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Uri": "/api/v1/export?x=1", "X-Forwarded-Method": "GET"}
	url := f.srv.URL + "/v1/auth?domain=edge"
	for i := 0; i < 10; i++ {
		resp := authGet(t, url, traefik)
		if resp.StatusCode != 200 || resp.Header.Get("X-Portero-Decision") != "allowed" || resp.Header.Get("RateLimit-Policy") == "" {
			t.Fatalf("traefik request %d: %d %v", i, resp.StatusCode, resp.Header)
		}
	}
	resp := authGet(t, url, traefik)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("X-Portero-Rule") != "edge.remote_address" {
		t.Fatalf("traefik refusal: %d %v", resp.StatusCode, resp.Header)
	}
	// Another client address is counted apart.
	other := map[string]string{"X-Forwarded-For": "203.0.113.10"}
	if resp := authGet(t, url, other); resp.StatusCode != 200 {
		t.Fatalf("other client: %d", resp.StatusCode)
	}
	// nginx convention (X-Original-URI): refusals are 403.
	nginx := map[string]string{"X-Original-URI": "/x", "X-Original-Method": "POST", "X-Forwarded-For": "203.0.113.9"}
	if resp := authGet(t, url, nginx); resp.StatusCode != 403 || resp.Header.Get("X-Portero-Decision") != "refused" {
		t.Fatalf("nginx refusal: %d", resp.StatusCode)
	}
	if resp := authGet(t, url+"&deny_status=429", nginx); resp.StatusCode != 429 {
		t.Fatalf("deny_status=429: %d", resp.StatusCode)
	}
	// Templates: path and method, a header placeholder; a missing header drops the descriptor.
	tmpl := f.srv.URL + "/v1/auth?domain=edge&descriptor=path={path}&descriptor=api_key={header:X-Api-Key},plan={header:X-Plan}"
	for i := 0; i < 101; i++ { // the export path rule is shadow: never refuses
		if resp := authGet(t, tmpl, map[string]string{"X-Forwarded-Uri": "/api/v2/export"}); resp.StatusCode != 200 {
			t.Fatalf("shadow path %d: %d", i, resp.StatusCode)
		}
	}
	h := map[string]string{"X-Forwarded-Uri": "/", "X-Api-Key": "k1", "X-Plan": "free"}
	for i := 0; i < 60; i++ {
		if resp := authGet(t, tmpl, h); resp.StatusCode != 200 {
			t.Fatalf("free plan %d: %d", i, resp.StatusCode)
		}
	}
	if resp := authGet(t, tmpl, h); resp.StatusCode != 429 || resp.Header.Get("X-Portero-Rule") != "free" {
		t.Fatalf("free plan spent: %d %v", resp.StatusCode, resp.Header)
	}
	// A client not behind a trusted proxy cannot choose its address: the
	// peer (loopback) is trusted here, so check a bad template instead.
	for _, bad := range []string{
		f.srv.URL + "/v1/auth",
		f.srv.URL + "/v1/auth?domain=edge&descriptor=nokey",
		f.srv.URL + "/v1/auth?domain=edge&descriptor=k={bogus}",
		f.srv.URL + "/v1/auth?domain=edge&descriptor=k={ip",
		f.srv.URL + "/v1/auth?domain=edge&deny_status=200",
	} {
		if resp := authGet(t, bad, nil); resp.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", bad, resp.StatusCode)
		}
	}
	if resp := authGet(t, f.srv.URL+"/v1/auth?domain=nope", nil); resp.StatusCode != 404 {
		t.Errorf("unknown domain: %d", resp.StatusCode)
	}
	if resp := authGet(t, f.srv.URL+"/healthz", nil); resp.StatusCode != 200 {
		t.Errorf("healthz: %d", resp.StatusCode)
	}
}

func TestAuthStoreFailure(t *testing.T) {
	for _, tt := range []struct {
		p      portero.FailurePolicy
		status int
	}{{portero.FailError, 503}, {portero.FailAllow, 200}, {portero.FailDeny, 429}} {
		st := &policytest.Store{}
		st.SetErr(fmt.Errorf("down: %w", portero.ErrStoreUnavailable))
		f := newFixtureWith(t, setup{store: st, authOnError: tt.p})
		resp := authGet(t, f.srv.URL+"/v1/auth?domain=edge", nil)
		if resp.StatusCode != tt.status {
			t.Errorf("%v: %d, want %d", tt.p, resp.StatusCode, tt.status)
		}
		if tt.p == portero.FailAllow && resp.Header.Get("X-Portero-Decision") != "allowed-store-unavailable" {
			t.Errorf("open: decision %q", resp.Header.Get("X-Portero-Decision"))
		}
		if tt.p != portero.FailDeny {
			continue
		}
		// deny keeps the proxy's statuses (nginx turns anything but 401
		// and 403 into a 500), with the service's problem type.
		req, _ := http.NewRequest("GET", f.srv.URL+"/v1/auth?domain=edge", nil)
		req.Header.Set("X-Original-URI", "/x")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p httpanswer.Problem
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 403 || p.Type != httpanswer.ProblemTemporaryReducedCapacity || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("deny behind nginx: %d %+v (%v), want 403 of type temporary-reduced-capacity with Retry-After: 1", resp.StatusCode, p, err)
		}
	}
}

func TestNewNeedsEngine(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without compiler and engine = nil error")
	}
}

func FuzzCheck(f *testing.F) {
	f.Add(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1"}]}],"cost":2}`)
	f.Add(`{"domain":"edge","descriptors":[{"entries":[{"key":"x","value":"y"}],"limit":{"requests_per_unit":0,"unit":"day"},"hits_addend":0}]}`)
	ms, _ := memstore.New(memstore.Config{SweepInterval: -1})
	defer ms.Close(context.Background())
	h, _ := New(doorConfig(f, ms, "", ""))
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/check", strings.NewReader(body)))
		if rec.Code != 200 && rec.Code != 400 && rec.Code != 404 && rec.Code != 413 && rec.Code != 415 && rec.Code != 429 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}
