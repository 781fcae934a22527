package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/redisstore"
)

// TestFailurePolicyHeaders: while Redis is down a rule is decided by the
// failure policy, not by a count, so the response keeps the rule in
// RateLimit-Policy but sends no RateLimit item for it (no made-up values
// such as "per-client";r=599;t=0), and no legacy X-RateLimit-* fields
// made from it; under deny the answer is a 503 with
// Retry-After. Real redis-server, killed.
func TestFailurePolicyHeaders(t *testing.T) {
	srv := redistest.Start(t)
	for _, pol := range []portero.FailurePolicy{portero.FailAllow, portero.FailLocal, portero.FailDeny} {
		t.Run(string(pol), func(t *testing.T) {
			store, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 100 * time.Millisecond, Prefix: "t-" + string(pol) + ":"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close(context.Background()) })
			p, err := policy.New([]policy.Rule{rule(t, "per-client", "ip", "600/min")}, policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var failures []portero.FailurePolicy
			lim, err := httplimit.New(httplimit.Config{Policy: p, Store: store, LegacyHeaders: true, OnStoreError: pol,
				OnDecision: func(_ *http.Request, v *engine.Verdict, _ time.Duration) {
					failures = append(failures, v.Results[0].Failure)
				}})
			if err != nil {
				t.Fatal(err)
			}
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
			get := func(want int) http.Header {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				if rec.Code != want {
					t.Fatalf("status %d, want %d", rec.Code, want)
				}
				return rec.Header()
			}
			if hd := get(200); !strings.HasPrefix(hd.Get("RateLimit"), `"per-client";r=599;`) {
				t.Fatalf("healthy: RateLimit = %q", hd.Get("RateLimit"))
			}
			srv.Kill()
			t.Cleanup(srv.Restart)
			want := 200
			if pol == portero.FailDeny {
				want = 503
			}
			hd := get(want)
			if pol == portero.FailDeny && hd.Get("Retry-After") != "1" {
				t.Errorf("deny: Retry-After = %q, want 1", hd.Get("Retry-After"))
			}
			if got := hd.Get("RateLimit-Policy"); got != `"per-client";q=600;w=60` {
				t.Errorf("degraded: RateLimit-Policy = %q, want the rule", got)
			}
			for _, name := range []string{"RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
				if v, ok := hd[http.CanonicalHeaderKey(name)]; ok {
					t.Errorf("degraded: %s = %q, want none", name, v)
				}
			}
			if len(failures) != 2 || failures[0] != "" || failures[1] != pol {
				t.Errorf("Result.Failure of the two decisions = %q, want [\"\" %s]", failures, pol)
			}
		})
	}
}
