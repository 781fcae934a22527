package gateway_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

// clockStores runs f with a memory store and a Redis store that decides
// at the caller's instant, so that a test clock is the clock of both.
func clockStores(t *testing.T, f func(t *testing.T, st portero.Store)) {
	t.Run("memory", func(t *testing.T) {
		st, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		f(t, st)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		st, err := redisstore.New(redisstore.Config{URL: srv.URL(), Clock: redisstore.CallerClock, Timeout: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		f(t, st)
	})
}

// clocked serves yaml with st on a test clock that starts at docClock.
func clocked(t *testing.T, yaml string, st portero.Store) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	cfg, err := config.Parse("limits.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	var offset atomic.Int64
	g, err := gateway.New(cfg, st, gateway.Hooks{Now: func() time.Time { return docClock.Add(time.Duration(offset.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv, &offset
}

// units is an upstream that reports, in X-Units, the cost its responses
// had: what a rule with a cost from the response and a reserve settles.
func units(t *testing.T, n int64) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Units", strconv.FormatInt(n, 10))
		io.WriteString(w, "ok\n")
	}))
	t.Cleanup(up.Close)
	return up
}

var rateLimitItem = regexp.MustCompile(`"([^"]+)";r=(\d+);t=(\d+)`)

// item reads rule's r and t from a RateLimit field.
func item(t *testing.T, h http.Header, rule string) (r, tt int64, ok bool) {
	t.Helper()
	for _, m := range rateLimitItem.FindAllStringSubmatch(strings.Join(h.Values("Ratelimit"), ", "), -1) {
		if m[1] == rule {
			r, _ = strconv.ParseInt(m[2], 10, 64)
			tt, _ = strconv.ParseInt(m[3], 10, 64)
			return r, tt, true
		}
	}
	return 0, 0, false
}

// look reads GET /v1/limits: the view of rule and its RateLimit item.
func look(t *testing.T, url, rule string) (gateway.LimitView, int64, int64) {
	t.Helper()
	resp, body := get(t, url+"/v1/limits")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/limits = %d %s", resp.StatusCode, body)
	}
	var ans gateway.LimitsAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatal(err)
	}
	for _, l := range ans.Limits {
		if l.Name == rule {
			r, tt, ok := item(t, resp.Header, rule)
			if !ok {
				t.Fatalf("/v1/limits: no RateLimit item for %s: %q", rule, resp.Header.Values("Ratelimit"))
			}
			return l, r, tt
		}
	}
	t.Fatalf("/v1/limits does not list %s: %s", rule, body)
	return gateway.LimitView{}, 0, 0
}

// TestLimitsTellTheNextDecision: what GET /v1/limits says of a rule is
// the decision the next request gets, field for field, for every
// algorithm and a calendar quota, at cost 1 and at a cost of 6 (a reserve
// settled from the response, or a fixed cost where the algorithm cannot
// refund), on a clock that moves by uneven steps, in memory and in Redis:
// when it gives a retry time the request is refused with that
// Retry-After and the same RateLimit item; when it gives none the request
// passes and leaves its remaining less the cost; and a look right after
// an admitted request says what that request's RateLimit said (remaining,
// and reset_seconds as its t).
func TestLimitsTellTheNextDecision(t *testing.T) {
	steps := append(make([]time.Duration, 22), 5*time.Second, 0, 37*time.Second, 0, 0, 100*time.Second, 0,
		250*time.Second, 3*time.Second, 0, 0, 600*time.Second, 0, 1500*time.Millisecond, 0, 13*time.Hour, 0, 0)
	cases := []struct{ alg, limit string }{
		{"token-bucket", "1/100s burst 20"},
		{"gcra", "1/100s burst 20"},
		{"leaky-meter", "1/100s burst 20"},
		{"sliding-log", "20/1000s"},
		{"sliding-counter", "20/1000s"},
		{"fixed-window", "20/1000s"},
		{"fixed-window-anchored", "20/1000s"},
		{"fixed-window", "20/day"},
	}
	clockStores(t, func(t *testing.T, st portero.Store) {
		for _, c := range cases {
			for _, cost := range []int64{1, 6} {
				name := fmt.Sprintf("%s %s cost %d", c.alg, c.limit, cost)
				rule := fmt.Sprintf("r%d-%s", cost, strings.ReplaceAll(c.alg, "-", ""))
				spec := ""
				switch {
				case cost > 1 && c.alg == "sliding-log":
					spec = ", cost: 6" // the log cannot refund a reservation
				case cost > 1:
					spec = `, cost: "response-header:X-Units", reserve: 6`
				}
				srv, clock := clocked(t, `upstreams: {api: {url: "`+units(t, cost).URL+`"}}
routes: [{name: api, upstream: api}]
rules:
  - {name: `+rule+`, key: ip, algorithm: `+c.alg+`, limit: "`+c.limit+`"`+spec+`}
`, st)
				refused, admitted := 0, 0
				for i, step := range steps {
					clock.Add(int64(step))
					l, lr, lt := look(t, srv.URL, rule)
					if l.Cost != 0 && l.Cost != cost || l.Cost == 0 && cost != 1 {
						t.Fatalf("%s step %d: /v1/limits looks at cost %d", name, i, l.Cost)
					}
					resp, body := get(t, srv.URL+"/x")
					r, tt, ok := item(t, resp.Header, rule)
					if !ok {
						t.Fatalf("%s step %d: %d without a RateLimit item for the rule: %q", name, i, resp.StatusCode, resp.Header.Values("Ratelimit"))
					}
					if l.RetryAfterSeconds > 0 {
						refused++
						if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != strconv.FormatInt(l.RetryAfterSeconds, 10) ||
							r != lr || tt != lt || lr != l.Remaining || lt != l.RetryAfterSeconds {
							t.Fatalf("%s step %d: /v1/limits said %+v (RateLimit r=%d t=%d); the request got %d Retry-After %q r=%d t=%d: %s",
								name, i, l, lr, lt, resp.StatusCode, resp.Header.Get("Retry-After"), r, tt, body)
						}
						continue
					}
					admitted++
					if resp.StatusCode != http.StatusOK || r != l.Remaining-cost || lr != l.Remaining || lt != l.ResetSeconds {
						t.Fatalf("%s step %d: /v1/limits said %+v (RateLimit r=%d t=%d); the request got %d r=%d t=%d: %s",
							name, i, l, lr, lt, resp.StatusCode, r, tt, body)
					}
					// The look's t is the reset, or the retry when the request
					// after would be refused.
					after, ar, at := look(t, srv.URL, rule)
					if after.Remaining != r || after.ResetSeconds != tt || ar != r || at != cmp.Or(after.RetryAfterSeconds, tt) {
						t.Fatalf("%s step %d: the request said r=%d t=%d; /v1/limits then says %+v (RateLimit r=%d t=%d)", name, i, r, tt, after, ar, at)
					}
				}
				if refused == 0 || admitted == 0 {
					t.Errorf("%s: %d refused, %d admitted: a weak sequence", name, refused, admitted)
				}
			}
		}
	})
}

// TestLimitsResetAsOfNow: a token bucket of 0.01/s and burst 20 with 7
// used is whole again in 700 s, which /v1/limits says (the figure of the
// state now, not of one more request: 800); after 50 s, in 650.
func TestLimitsResetAsOfNow(t *testing.T) {
	st, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	up, _, _ := upstream(t)
	srv, clock := clocked(t, `upstreams: {api: {url: "`+up.URL+`"}}
routes: [{name: api, upstream: api}]
rules:
  - {name: slow, key: ip, algorithm: token-bucket, limit: "1/100s burst 20"}
`, st)
	for range 7 {
		get(t, srv.URL+"/x")
	}
	if l, _, lt := look(t, srv.URL, "slow"); l.Remaining != 13 || l.ResetSeconds != 700 || lt != 700 {
		t.Errorf("after 7 of 20: %+v, RateLimit t=%d; want 13 left, whole in 700 s", l, lt)
	}
	clock.Add(int64(50 * time.Second))
	if l, _, lt := look(t, srv.URL, "slow"); l.Remaining != 13 || l.ResetSeconds != 650 || lt != 650 {
		t.Errorf("50 s later: %+v, RateLimit t=%d; want 13 left, whole in 650 s", l, lt)
	}
}

// TestLimitsHonourReserve: a rule that reserves 60 units with 50 left
// refuses the next request; /v1/limits says so, with the request's
// Retry-After (10 units more at one per 10 s: 100 s), rather than 50 left
// and no wait.
func TestLimitsHonourReserve(t *testing.T) {
	st, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	srv, _ := clocked(t, `upstreams: {api: {url: "`+units(t, 50).URL+`"}}
routes: [{name: api, upstream: api}]
rules:
  - {name: tokens, key: ip, algorithm: token-bucket, limit: "1/10s burst 100", cost: "response-header:X-Units", reserve: 60}
`, st)
	if resp, body := get(t, srv.URL+"/x"); resp.StatusCode != http.StatusOK {
		t.Fatalf("first request = %d %s", resp.StatusCode, body)
	}
	l, _, lt := look(t, srv.URL, "tokens")
	if l.Remaining != 50 || l.Cost != 60 || l.RetryAfterSeconds != 100 || lt != 100 {
		t.Errorf("50 of 100 left under a reserve of 60: %+v, RateLimit t=%d; want 50 left, cost 60, retry in 100 s", l, lt)
	}
	resp, body := get(t, srv.URL+"/x")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "100" {
		t.Errorf("the next request = %d Retry-After %q %s; want 429 after 100 s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// TestLimitsOutsideThePlan: asked about a request its plan does not
// cover, /v1/limits answers as that request would be answered, 403; a
// plan's throttle and quota apply to the routes the plan covers.
func TestLimitsOutsideThePlan(t *testing.T) {
	up, _, _ := upstream(t)
	_, srv, _ := gw(t, planYAML(up.URL))
	for _, q := range []string{"?method=DELETE&path=/pets/1", "?method=POST&path=/orders", "?path=/orders"} {
		resp, body := get(t, srv.URL+"/v1/limits"+q, "X-API-Key", "basic-key")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "usage plan basic does not cover") {
			t.Errorf("/v1/limits%s for basic = %d %s, want 403 as the request gets", q, resp.StatusCode, body)
		}
	}
	resp, body := get(t, srv.URL+"/v1/limits?method=GET&path=/pets/1", "X-API-Key", "basic-key")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/limits for a covered request = %d %s", resp.StatusCode, body)
	}
	var ans gateway.LimitsAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatal(err)
	}
	for _, l := range ans.Limits {
		if (l.Level == "plan" || l.Level == "quota") && l.AppliesTo != "GET /pets/**" {
			t.Errorf("%s applies to %q, want the plan's routes, GET /pets/**", l.Name, l.AppliesTo)
		}
	}
}

// TestLimitsCostHeader: a cost read from a header is read from the
// /v1/limits request's own: it asks about a request of that cost, one
// above what the rule admits can never pass, and a malformed one gets the
// 400 the request would get.
func TestLimitsCostHeader(t *testing.T) {
	up, _, _ := upstream(t)
	_, srv, _ := gw(t, `upstreams: {api: {url: "`+up.URL+`"}}
routes: [{name: api, upstream: api}]
rules:
  - {name: units, key: ip, algorithm: fixed-window, limit: 20/h, cost: "header:X-Cost"}
`)
	for _, c := range []struct {
		cost   string
		status int
		want   string
	}{
		{"5", 200, `"cost": 5,`},
		{"20", 200, `"remaining": 20,`},
		{"21", 200, `"can_never_pass": true`},
		{"abc", 400, "bad cost: header X-Cost"},
	} {
		resp, body := get(t, srv.URL+"/v1/limits", "X-Cost", c.cost)
		if resp.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("/v1/limits with X-Cost %s = %d %s, want %d with %s", c.cost, resp.StatusCode, body, c.status, c.want)
		}
		if c.status == 400 {
			if r, _ := get(t, srv.URL+"/x", "X-Cost", c.cost); r.StatusCode != 400 {
				t.Errorf("the request with X-Cost %s = %d, want the same 400", c.cost, r.StatusCode)
			}
		}
	}
}
