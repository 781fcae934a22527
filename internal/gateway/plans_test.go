package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

// planYAML is examples/usage-plans.yaml in small numbers, with inline keys.
func planYAML(upstream string) string {
	return `upstreams: {api: {url: "` + upstream + `"}}
routes: [{name: api, upstream: api}]
address_lists:
  monitoring: [203.0.113.0/24]
levels:
  global: {rate: 1000, burst: 500}
  stages:
    - {name: prod, match: {host: api.example.com}, rate: 350, burst: 350}
  methods:
    - {name: create-order, stage: prod, match: {methods: [POST], path: /orders}, rate: 50}
plans:
  basic:
    rate: 10
    quota: 5/day
    routes: [{methods: [GET], path: /pets/**}]
  gold:
    rate: 300
    quota: 500000/day
api_keys:
  keys:
    - {id: acme, plan: gold, sha256: ` + apikey.Hash("gold-key") + `}
    - {id: bob, plan: basic, sha256: ` + apikey.Hash("basic-key") + `}
rate_rules:
  - {name: per-ip-5min, limit: 2000, scope_down: {not_addresses: [monitoring]}}
`
}

func planStores(t *testing.T, f func(t *testing.T, st portero.Store)) {
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

func TestUsagePlansAtTheDoor(t *testing.T) {
	up, calls, _ := upstream(t)
	planStores(t, func(t *testing.T, st portero.Store) {
		cfg, err := config.Parse("plans.yaml", []byte(planYAML(up.URL)))
		if err != nil {
			t.Fatal(err)
		}
		g, err := gateway.New(cfg, st, gateway.Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g)
		t.Cleanup(srv.Close)
		do := func(method, path, key string) (*http.Response, string) {
			t.Helper()
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			req.Host = "api.example.com"
			if key != "" {
				req.Header.Set("X-API-Key", key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp, string(b)
		}
		before := calls.Load()
		for _, tt := range []struct{ method, path, key, detail string }{
			{"GET", "/pets/1", "", "missing API key"},
			{"GET", "/pets/1", "stolen-key", "unknown API key"},
			{"GET", "/v1/limits", "", "missing API key"},
			{"DELETE", "/pets/1", "basic-key", "usage plan basic does not cover DELETE /pets/1"},
		} {
			resp, body := do(tt.method, tt.path, tt.key)
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, tt.detail) {
				t.Errorf("%s %s with key %q = %d %s, want 403 saying %q", tt.method, tt.path, tt.key, resp.StatusCode, body, tt.detail)
			}
		}
		if calls.Load() != before {
			t.Error("a refused key reached the upstream")
		}

		// basic: a quota of 5 a day, its own RateLimit-Policy item; the 6th
		// is refused as a spent quota.
		for i := range 5 {
			if resp, body := do("GET", "/pets/1", "basic-key"); resp.StatusCode != 200 {
				t.Fatalf("basic request %d = %d %s", i, resp.StatusCode, body)
			}
		}
		resp, body := do("GET", "/pets/1", "basic-key")
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"violated-policies":["plan/basic/quota"]`) || !strings.Contains(body, "quota of 5 per calendar day") {
			t.Errorf("6th basic request = %d %s, want 429 by the spent quota", resp.StatusCode, body)
		}

		// gold asks what it has left, three times: a look counts nothing.
		do("GET", "/pets/1", "gold-key")
		var ans gateway.LimitsAnswer
		for range 3 {
			resp, body = do("GET", "/v1/limits", "gold-key")
			if resp.StatusCode != 200 {
				t.Fatalf("/v1/limits = %d %s", resp.StatusCode, body)
			}
			if err := json.Unmarshal([]byte(body), &ans); err != nil {
				t.Fatal(err)
			}
		}
		if ans.Client.APIKey != "acme" || ans.Client.Plan != "gold" {
			t.Errorf("client = %+v", ans.Client)
		}
		got := map[string]gateway.LimitView{}
		var names []string
		for _, l := range ans.Limits {
			got[l.Name] = l
			names = append(names, l.Name)
		}
		if want := "global stage/prod method/create-order plan/gold plan/gold/quota per-ip-5min"; strings.Join(names, " ") != want {
			t.Errorf("limits = %v, want %s (not basic's)", names, want)
		}
		q := got["plan/gold/quota"]
		// One gold request so far: 499,999 left of 500,000 today.
		if !q.Quota || q.Max != 500000 || q.Remaining != 499999 || q.Level != "quota" || q.PeriodEndsSeconds <= 0 || q.PeriodEndsSeconds > 86400 {
			t.Errorf("quota = %+v, want 499999 of 500000 left, the period's end", q)
		}
		if l := got["global"]; !l.Shared || l.Level != "global" || l.Max != 500 || l.Remaining > 500 || l.Remaining < 490 {
			t.Errorf("global = %+v", l)
		}
		if l := got["plan/gold"]; l.Shared || l.Max != 300 {
			t.Errorf("plan throttle = %+v", l)
		}
		pol := resp.Header.Values("Ratelimit-Policy")
		if len(pol) != 1 || !strings.Contains(pol[0], `"plan/gold/quota";q=500000;w=86400`) || !strings.Contains(pol[0], `"plan/gold";q=300;w=1`) {
			t.Errorf("RateLimit-Policy = %q, want the quota as its own item beside the throttle", pol)
		}
		if rl := resp.Header.Get("Ratelimit"); !strings.Contains(rl, `"plan/gold/quota";r=499999;`) {
			t.Errorf("RateLimit = %q", rl)
		}
		if resp.Header.Get("Retry-After") != "" {
			t.Error("a look sent Retry-After")
		}
		// Asking about one request: POST /orders meets the method level.
		resp, body = do("GET", "/v1/limits?method=POST&path=/orders", "gold-key")
		if !strings.Contains(body, `"method/create-order"`) || resp.StatusCode != 200 {
			t.Errorf("/v1/limits?method=POST&path=/orders = %d %s", resp.StatusCode, body)
		}
		resp, body = do("GET", "/v1/limits?method=GET&path=/pets", "gold-key")
		if strings.Contains(body, `"method/create-order"`) {
			t.Errorf("GET /pets lists the POST /orders level: %s", body)
		}
		// basic's spent quota shows as nothing left, with its retry time.
		_, body = do("GET", "/v1/limits", "basic-key")
		if !strings.Contains(body, `"name": "plan/basic/quota"`) || !strings.Contains(body, `"remaining": 0,`) || !strings.Contains(body, `"retry_after_seconds"`) {
			t.Errorf("basic's limits: %s", body)
		}
	})
}

// TestLimitsEndpointOff: limits_endpoint: off hands /v1/limits to the routes.
func TestLimitsEndpointOff(t *testing.T) {
	up, _, seen := upstream(t)
	_, srv, _ := gw(t, "upstreams: {api: {url: \""+up.URL+"\"}}\nroutes: [{upstream: api}]\nlimits_endpoint: \"off\"\n")
	resp, _ := get(t, srv.URL+"/v1/limits")
	if resp.StatusCode != 200 || (<-seen).Path != "/v1/limits" {
		t.Errorf("with limits_endpoint off, /v1/limits = %d, want the upstream's", resp.StatusCode)
	}
}

// TestDecideAtTheDoor: Decide answers the API-gateway model's door (a
// missing or unknown key, a plan that does not cover the request, the
// limits endpoint and its 405) as ServeHTTP does on loopback, for a
// request that carries its key and for one replayed from the access log's
// record of it (WithLoggedAPIKey, the header absent), and counts no limit
// for any of them.
func TestDecideAtTheDoor(t *testing.T) {
	up, _, _ := upstream(t)
	_, srv, _ := gw(t, planYAML(up.URL))
	dec, _, _ := gw(t, planYAML(up.URL))
	for _, c := range []struct {
		method, path, key string
		answered          string
	}{
		{"GET", "/pets/1", "", gateway.AnsweredForbidden},
		{"GET", "/pets/1", "no-such-key", gateway.AnsweredForbidden},
		{"GET", "/pets/1", strings.Repeat("k", apikey.MaxKeyLen+1), gateway.AnsweredForbidden},
		{"POST", "/orders", "basic-key", gateway.AnsweredForbidden}, // not in the basic plan
		{"GET", "/pets/1", "basic-key", ""},
		{"POST", "/orders", "gold-key", ""},
		{"GET", "/v1/limits", "basic-key", gateway.AnsweredLimits},
		{"POST", "/v1/limits", "basic-key", gateway.AnsweredLimits},
		{"GET", "/v1/limits", "", gateway.AnsweredForbidden},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		if c.key != "" {
			req.Header.Set("X-API-Key", c.key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		for _, logged := range []bool{false, true} {
			r := httptest.NewRequest(c.method, c.path, nil)
			r.RemoteAddr = "192.0.2.1:1234"
			if logged {
				r = r.WithContext(gateway.WithLoggedAPIKey(r.Context(), apikey.Logged(c.key)))
			} else if c.key != "" {
				r.Header.Set("X-API-Key", c.key)
			}
			var d gateway.Decision
			dec.Decide(r, time.Now(), &d)
			status := d.Status
			if status == 0 {
				status = http.StatusOK // forwarded: the upstream answers 200
			}
			if status != res.StatusCode || d.Answered != c.answered {
				t.Errorf("%s %s key %.12q (logged %v): Decide = %d answered %q, ServeHTTP answered %d (want answered %q)",
					c.method, c.path, c.key, logged, status, d.Answered, res.StatusCode, c.answered)
			}
			if (d.Verdict == nil) != (c.answered != "") {
				t.Errorf("%s %s key %.12q (logged %v): verdict %v: the door answers before any limit, the others reach the limiter",
					c.method, c.path, c.key, logged, d.Verdict)
			}
		}
	}
}

// TestTwoAPIKeys: a request that gives the key header twice is refused
// with 400 saying why, whichever keys they are, before the upstream and
// before any limit: neither key's plan is charged for it. Decide answers
// the same.
func TestTwoAPIKeys(t *testing.T) {
	up, calls, _ := upstream(t)
	g, srv, _ := gw(t, planYAML(up.URL))
	for _, keys := range [][]string{{"basic-key", "gold-key"}, {"gold-key", "gold-key"}, {"gold-key", "stolen-key"}} {
		req, _ := http.NewRequest("GET", srv.URL+"/pets/1", nil)
		req.Header["X-Api-Key"] = keys
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(string(b), "the X-API-Key header is given 2 times: send one API key") {
			t.Errorf("keys %q = %d %s, want 400 saying the header is given twice", keys, resp.StatusCode, b)
		}
		r := httptest.NewRequest("GET", "/pets/1", nil)
		r.Header["X-Api-Key"] = keys
		var d gateway.Decision
		g.Decide(r, time.Now(), &d)
		if d.Status != http.StatusBadRequest || d.Answered != gateway.AnsweredBadRequest || d.Verdict != nil {
			t.Errorf("Decide with keys %q = %d %q, want 400 %q before the limits", keys, d.Status, d.Answered, gateway.AnsweredBadRequest)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d requests with two keys reached the upstream", n)
	}
	for _, key := range []string{"basic-key", "gold-key"} {
		_, body := get(t, srv.URL+"/v1/limits", "X-API-Key", key)
		var ans gateway.LimitsAnswer
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			t.Fatal(err)
		}
		for _, l := range ans.Limits {
			if l.Level == "quota" && l.Remaining != l.Max {
				t.Errorf("%s: quota %s has %d of %d left: charged for a request with two keys", key, l.Name, l.Remaining, l.Max)
			}
		}
	}
}
