package gateway_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/store/memstore"
)

// TestExampleGatewayStarts loads examples/gateway.yaml as written, with no
// environment prepared (it once needed PORTERO_ADMIN_TOKEN to start),
// checks that it listens on loopback, and runs the gateway with it on a
// loopback port: the example's login rule (5 per minute) refuses the sixth
// POST /login while the upstream, absent here, answers 502 before it.
func TestExampleGatewayStarts(t *testing.T) {
	if v, ok := os.LookupEnv("PORTERO_ADMIN_TOKEN"); ok {
		os.Unsetenv("PORTERO_ADMIN_TOKEN")
		t.Cleanup(func() { os.Setenv("PORTERO_ADMIN_TOKEN", v) })
	}
	cfg, err := config.Load("../../examples/gateway.yaml")
	if err != nil {
		t.Fatalf("examples/gateway.yaml does not load as written:\n%v", err)
	}
	for _, addr := range []string{cfg.Listen, cfg.AdminListen} {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("example listens on %q: want a loopback address", addr)
		}
	}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	g, err := gateway.New(cfg, store, gateway.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	g.SetReady(true)
	srv := httptest.NewServer(g) // 127.0.0.1, a free port
	defer srv.Close()
	if resp, _ := get(t, srv.URL+"/healthz"); resp.StatusCode != 200 {
		t.Errorf("/healthz = %d", resp.StatusCode)
	}
	var codes []int
	for range 6 {
		resp, err := http.Post(srv.URL+"/login", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if codes[5] != 429 {
		t.Errorf("6 logins: %v, want the sixth refused", codes)
	}
	for _, c := range codes[:5] {
		if c == 429 {
			t.Errorf("6 logins: %v, want the first five passed to the upstream", codes)
		}
	}
}

// TestExampleOverload loads examples/overload.yaml as written and serves
// with it on loopback: every neighbour it names reaches the gateway (the
// Gate with its reserves, queue and fair shedding, the priorities, the
// concurrency rules and their queue, the shape), and a request passes
// through all of them to the demo upstream, announcing the rate and
// concurrency limits that applied in one RateLimit field.
func TestExampleOverload(t *testing.T) {
	cfg, err := config.Load("../../examples/overload.yaml")
	if err != nil {
		t.Fatalf("examples/overload.yaml does not load as written:\n%v", err)
	}
	o := cfg.Overload
	if o == nil || o.Gate.MaxInFlight != 400 || o.Gate.Reserve.Critical != 20 || o.Gate.QueueSize != 100 || o.Gate.Shedding != overload.Fair ||
		len(cfg.Priorities) != 3 || cfg.Queues["exports"].Size != 4 || cfg.Shapes["sms"].Delay != 5 {
		t.Fatalf("the example's neighbours: overload %+v, priorities %d, queues %+v, shapes %+v", o, len(cfg.Priorities), cfg.Queues, cfg.Shapes)
	}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	g, err := gateway.New(cfg, store, gateway.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	g.SetReady(true)
	srv := httptest.NewServer(g)
	defer srv.Close()
	resp, body := get(t, srv.URL+"/export/1", "X-API-Key", "k", "X-Tenant", "acme")
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != `"per-tenant";r=199;t=1, "exports";r=1` {
		t.Errorf("an export: %d RateLimit %q %s", resp.StatusCode, resp.Header.Get("RateLimit"), body)
	}
	if st := g.Gate().Stats(); st.Started != 1 || st.Finished != 1 {
		t.Errorf("gate %+v: the export did not pass through it", st)
	}
}
