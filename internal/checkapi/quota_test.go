package checkapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/store/memstore"
)

// TestCheckQuotaMode: under envoyproxy/ratelimit's QUOTA_MODE a request
// with a descriptor that has no limit passes even when its quota is spent,
// as the Envoy door answers it (Plan.Code); without that descriptor the
// spent quota refuses.
func TestCheckQuotaMode(t *testing.T) {
	lim, err := envoyconf.Parse([]envoyconf.Source{{Name: "q.yaml", Data: []byte(
		"domain: q\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")}}, envoyconf.Options{Envoyproxy: true, QuotaMode: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	eng, err := engine.New(engine.Options{Store: st, Counting: engine.CountEach})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Compiler: descriptor.NewCompiler(lim, descriptor.Options{Envoyproxy: true, QuotaMode: true}), Engine: eng,
		Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ask := func(body string) CheckResponse {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out CheckResponse
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	user := `{"domain":"q","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`
	withNoLimit := `{"domain":"q","descriptors":[{"entries":[{"key":"user","value":"u"}]},{"entries":[{"key":"other","value":"x"}]}]}`
	for i, c := range []struct {
		body    string
		allowed bool
		code    string
	}{{user, true, "OK"}, {user, false, "OVER_LIMIT"}, {withNoLimit, true, "OK"}} {
		if got := ask(c.body); got.Allowed != c.allowed || got.Code != c.code {
			t.Errorf("call %d: allowed %v code %s, want %v %s", i+1, got.Allowed, got.Code, c.allowed, c.code)
		}
	}
}
