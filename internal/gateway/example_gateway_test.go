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
