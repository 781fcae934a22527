package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/redisstore"
)

// TestFailurePolicyHeaders: while Redis is down a fail-open or local rule
// is decided by the failure policy, not by a count, so the response keeps
// the rule in RateLimit-Policy but sends no RateLimit item for it (it used
// to send made-up values such as "per-client";r=599;t=0), and no legacy
// X-RateLimit-* fields made from it. Real redis-server, killed.
func TestFailurePolicyHeaders(t *testing.T) {
	srv := redistest.Start(t)
	for _, pol := range []redisstore.Policy{redisstore.FailOpen, redisstore.FailLocal} {
		t.Run(string(pol), func(t *testing.T) {
			store, err := redisstore.New(redisstore.Config{URL: srv.URL(), Policy: pol, Timeout: 100 * time.Millisecond, Prefix: "t-" + string(pol) + ":"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close(context.Background()) })
			p, err := policy.New([]policy.Rule{rule(t, "per-client", "ip", "600/min")}, policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var degraded []bool
			lim, err := httplimit.New(httplimit.Config{Policy: p, Store: store, LegacyHeaders: true,
				OnDecision: func(_ *http.Request, v *policy.Verdict, _ time.Duration) {
					degraded = append(degraded, v.Results[0].Decision.Degraded)
				}})
			if err != nil {
				t.Fatal(err)
			}
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
			get := func() http.Header {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				if rec.Code != 200 {
					t.Fatalf("status %d, want 200", rec.Code)
				}
				return rec.Header()
			}
			if hd := get(); !strings.HasPrefix(hd.Get("RateLimit"), `"per-client";r=599;`) {
				t.Fatalf("healthy: RateLimit = %q", hd.Get("RateLimit"))
			}
			srv.Kill()
			t.Cleanup(srv.Restart)
			hd := get()
			if got := hd.Get("RateLimit-Policy"); got != `"per-client";q=600;w=60` {
				t.Errorf("degraded: RateLimit-Policy = %q, want the rule", got)
			}
			for _, name := range []string{"RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
				if v, ok := hd[http.CanonicalHeaderKey(name)]; ok {
					t.Errorf("degraded: %s = %q, want none", name, v)
				}
			}
			if len(degraded) != 2 || degraded[0] || !degraded[1] {
				t.Errorf("Decision.Degraded of the two decisions = %v, want [false true]", degraded)
			}
		})
	}
}
