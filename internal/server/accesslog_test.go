package server_test

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/accesslog"
	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/gatewaylog"
	"github.com/portero-rl/portero/internal/server"
)

func readEntries(t *testing.T, path string) []accesslog.Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []accesslog.Entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e accesslog.Entry
		if err := accesslog.ParseJSON(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// TestAccessLog: one JSON line per request with what replay needs and
// what an operator reads (decision, rule, key, status, latency, route,
// upstream), the probes left out; a rename and a reopen rotate the file.
func TestAccessLog(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "p.yaml")
	writeFile(t, cfg, `upstreams: {d: {type: demo}}
routes: [{name: api, match: {path: "/api/**"}, upstream: d}]
rules:
  - {name: per-key, key: "header:X-Api-Key", limit: 2/min}
  - {name: wide, key: ip, limit: 1/min, mode: shadow}
`)
	path := filepath.Join(dir, "access.log")
	reopen := make(chan struct{})
	r := start(t, server.Options{ConfigPath: cfg, AccessLog: gatewaylog.Options{Path: path}, Reopen: reopen})
	for range 3 {
		get(t, r.gateway+"/api/x", "X-Api-Key", "k1", "User-Agent", "test")
	}
	get(t, r.gateway+"/nowhere")
	get(t, r.gateway+"/healthz")
	waitFor(t, "4 access log lines", func() bool { b, _ := os.ReadFile(path); return strings.Count(string(b), "\n") >= 4 })
	es := readEntries(t, path)
	if len(es) != 4 {
		t.Fatalf("%d lines, want 4 (the probe is not logged)", len(es))
	}
	a, refused, none := es[0], es[2], es[3]
	if a.Method != "GET" || a.Path != "/api/x" || a.Status != 200 || a.Decision != "allowed" || a.Rule != "per-key" ||
		// X-Api-Key is read by a key alone: logged by its hash.
		a.Key != "header:X-Api-Key="+apikey.Hash("k1") || a.Route != "api" || a.Upstream != "d" || a.Peer != "127.0.0.1" || a.ClientIP != "127.0.0.1" ||
		a.Latency <= 0 || a.Bytes == 0 || len(a.Header) != 1 || a.Header[0] != (accesslog.Header{Name: "X-Api-Key", Value: apikey.Hash("k1")}) ||
		len(a.Shadow) != 0 {
		t.Errorf("first line %+v", a)
	}
	if len(es[1].Shadow) != 1 || es[1].Shadow[0] != "wide" {
		t.Errorf("second line %+v: want the shadow rule that would refuse", es[1])
	}
	if refused.Status != 429 || refused.Decision != "refused" || refused.Rule != "per-key" {
		t.Errorf("third line %+v: want a 429 by per-key", refused)
	}
	if none.Status != 404 || none.Route != "" || none.Decision != "no-rule" && none.Decision != "allowed" {
		t.Errorf("fourth line %+v: want a 404 without route", none)
	}
	if !a.Time.Before(es[3].Time) {
		t.Errorf("times %v … %v do not increase", a.Time, es[3].Time)
	}
	// Rotation: rename, reopen, and the next line goes to a new file.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	reopen <- struct{}{}
	waitFor(t, "the reopen", func() bool { return strings.Contains(r.logs.String(), "access log reopened") })
	if code, _, _ := get(t, r.gateway+"/api/y", "X-Api-Key", "k2"); code != http.StatusOK {
		t.Fatalf("after the reopen: %d", code)
	}
	waitFor(t, "a line in the new file", func() bool { b, _ := os.ReadFile(path); return strings.Count(string(b), "\n") == 1 })
	if es := readEntries(t, path); es[0].Path != "/api/y" {
		t.Errorf("new file: %+v", es)
	}
	if n := len(readEntries(t, path+".1")); n != 4 {
		t.Errorf("rotated file has %d lines, want 4", n)
	}
}

// TestAccessLogHeaderAsked: --access-log-header records a header as sent,
// even one the keys alone read (hashed otherwise), to try a policy that
// matches on it.
func TestAccessLogHeaderAsked(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "p.yaml")
	writeFile(t, cfg, `upstreams: {d: {type: demo}}
routes: [{name: api, upstream: d}]
rules:
  - {name: per-key, key: "header:X-Api-Key", limit: 2/min}
  - {name: per-user, key: "header:X-User-Token", limit: 2/min}
`)
	path := filepath.Join(dir, "access.log")
	r := start(t, server.Options{ConfigPath: cfg, AccessLog: gatewaylog.Options{Path: path, Headers: []string{"x-api-key", "X-Tier"}}})
	get(t, r.gateway+"/", "X-Api-Key", "k1", "X-User-Token", "t1", "X-Tier", "gold")
	waitFor(t, "1 access log line", func() bool { b, _ := os.ReadFile(path); return strings.Count(string(b), "\n") >= 1 })
	es := readEntries(t, path)
	want := []accesslog.Header{{Name: "X-Api-Key", Value: "k1"}, {Name: "X-Tier", Value: "gold"}, {Name: "X-User-Token", Value: apikey.Hash("t1")}}
	if len(es) != 1 || fmt.Sprint(es[0].Header) != fmt.Sprint(want) {
		t.Errorf("headers %v, want %v", es[0].Header, want)
	}
}
