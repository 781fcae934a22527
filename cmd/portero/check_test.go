package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestCheckPolicyIsNoFlag: `portero check` asks rate limit services about
// descriptors only. A flag naming one of serve's rules would POST
// /v1/check to serve, which forwards it to its upstream: a request spent
// and no answer. So the command line is refused before anything is sent
// (the server here stands for serve's upstream).
func TestCheckPolicyIsNoFlag(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { got.Add(1) }))
	defer srv.Close()
	expect(t, []string{"check", "--server", srv.URL, "--policy", "per-client", "--key", "ip=127.0.0.1/32"}, "unknown flag: --policy")
	if n := got.Load(); n != 0 {
		t.Errorf("the server got %d requests, want none", n)
	}
}
