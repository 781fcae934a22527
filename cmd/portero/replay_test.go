package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gatewaylog"
	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/store/memstore"
)

// replayPolicy has every kind of rule replay must decide as serve does:
// per client behind a trusted proxy, per API key with a token bucket,
// stacked, a shadow rule, a calendar quota that crosses midnight, a cost
// from a header (some costs can never pass, some cannot be read), a rule
// on one path, and a path no route matches (404 after the limits).
const replayPolicy = `
client_ip:
  trusted_proxies: [127.0.0.0/8]
upstreams:
  demo: {type: demo}
routes:
  - {name: api, match: {path: "/api/**"}, upstream: demo}
rules:
  - {name: per-ip, key: ip, limit: 8/s}
  - {name: per-key, key: "header:X-Api-Key", algorithm: token-bucket, limit: 5/s burst 10}
  - {name: daily, key: "header:X-Api-Key", limit: 120/day}
  - {name: strict, key: ip, limit: 3/s, mode: shadow}
  - {name: search, key: "header:X-Api-Key", match: {path: "/api/search"}, limit: 10/s, cost: "header:X-Cost"}
`

// virtualClock is serve's clock in these tests: the instant each request
// is decided at, set before it is sent (one request at a time).
type virtualClock struct{ ns atomic.Int64 }

func (c *virtualClock) now() time.Time  { return time.Unix(0, c.ns.Load()) }
func (c *virtualClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

var listenRE = regexp.MustCompile(`portero: gateway listening on (http://\S+)`)

// startServe runs server.Run with the policy on a loopback port, on the
// virtual clock, with the JSON access log at accessLog.
func startServe(t *testing.T, cfgPath, accessLog string, clock *virtualClock) (gateway string, stop func()) {
	t.Helper()
	return startServeWith(t, server.Options{ConfigPath: cfgPath, Now: clock.now, AccessLog: gatewaylog.Options{Path: accessLog},
		// No sweeper: it reads the wall clock, far from the virtual one.
		OpenStore: func(cfg *config.Config, _ *slog.Logger) (portero.Store, error) {
			return memstore.New(memstore.Config{MaxKeys: cfg.MaxKeys, SweepInterval: -1})
		}})
}

// startServeWith runs server.Run with opts (and a loopback gateway, no
// admin listener) until stop.
func startServeWith(t *testing.T, opts server.Options) (gateway string, stop func()) {
	t.Helper()
	out := &testenv.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	hurry := make(chan struct{})
	done := make(chan error, 1)
	opts.Listen, opts.AdminListen, opts.Stdout, opts.Hurry = "127.0.0.1:0", "off", out, hurry
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- server.Run(ctx, opts) }()
	stop = func() {
		close(hurry)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := listenRE.FindStringSubmatch(out.String()); m != nil {
			return m[1], stop
		}
		select {
		case err := <-done:
			t.Fatalf("serve returned: %v", err)
		default:
		}
	}
	t.Fatal("serve printed no address")
	return "", nil
}

type replayedRequest struct {
	at                time.Time
	method, path      string
	client, key, cost string
}

// trafficFor makes n requests from a few clients and keys, at random
// sub-second instants from 90 s before midnight UTC to 30 s after.
func trafficFor(n int) []replayedRequest {
	rng := rand.New(rand.NewPCG(15, 15))
	at := time.Date(2026, 3, 1, 23, 58, 30, 0, time.UTC)
	var out []replayedRequest
	for range n {
		at = at.Add(time.Duration(rng.IntN(240)) * time.Millisecond)
		r := replayedRequest{at: at, method: "GET", path: "/api/items", client: fmt.Sprintf("203.0.113.%d", 1+rng.IntN(4))}
		if rng.IntN(5) > 0 {
			r.key = fmt.Sprintf("key-%d", rng.IntN(3))
		}
		switch rng.IntN(10) {
		case 0:
			r.path = "/elsewhere" // no route: 404 once it passes the limits
		case 1, 2:
			r.path, r.cost = "/api/search", strconv.Itoa(1+rng.IntN(4))
		case 3:
			r.path, r.cost = "/api/search", []string{"11", "40", "abc"}[rng.IntN(3)] // can never pass, or unreadable
		case 4:
			r.method = "POST"
		}
		out = append(out, r)
	}
	return out
}

// readStatuses reads the status column of a decisions file.
func readStatuses(t *testing.T, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 || strings.Join(rows[0], ",") != "line,time,client,method,path,status,rule,decision" {
		t.Fatalf("decisions header %v", rows)
	}
	var out []int
	for _, r := range rows[1:] {
		n, _ := strconv.Atoi(r[5])
		out = append(out, n)
	}
	return out
}

// TestReplayMatchesServe: the same requests at the same instants get the
// same statuses from a running portero serve and from portero replay — fed
// a CSV of the requests, and fed serve's own JSON access log (the round
// trip serve → access log → replay).
func TestReplayMatchesServe(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "portero.yaml")
	if err := os.WriteFile(cfgPath, []byte(replayPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	accessLog := filepath.Join(dir, "access.log")
	clock := &virtualClock{}
	gw, stop := startServe(t, cfgPath, accessLog, clock)
	traffic := trafficFor(700)
	var served []int
	var csvLog strings.Builder
	csvLog.WriteString("time,method,path,client_ip,header:X-Api-Key,header:X-Cost\n")
	client := &http.Client{}
	for _, r := range traffic {
		clock.set(r.at)
		req, _ := http.NewRequest(r.method, gw+r.path, nil)
		req.Header.Set("X-Forwarded-For", r.client)
		if r.key != "" {
			req.Header.Set("X-Api-Key", r.key)
		}
		if r.cost != "" {
			req.Header.Set("X-Cost", r.cost)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		served = append(served, res.StatusCode)
		fmt.Fprintf(&csvLog, "%s,%s,%s,%s,%s,%s\n", r.at.Format(time.RFC3339Nano), r.method, r.path, r.client, r.key, r.cost)
	}
	stop() // flushes and closes the access log
	counts := map[int]int{}
	for _, s := range served {
		counts[s]++
	}
	// The traffic must exercise every answer, or agreeing proves little.
	for _, s := range []int{200, 404, 429, 400} {
		if counts[s] < 5 {
			t.Fatalf("serve answered %d only %d times (%v): the traffic does not exercise it", s, counts[s], counts)
		}
	}
	t.Logf("serve answered %v", counts)
	if raw, _ := os.ReadFile(accessLog); strings.Contains(string(raw), "key-0") {
		t.Errorf("serve's access log holds the API key key-0 as sent; a header only keys read is logged hashed")
	}
	csvPath := filepath.Join(dir, "requests.csv")
	os.WriteFile(csvPath, []byte(csvLog.String()), 0o644)
	for _, in := range []struct{ name, path string }{{"csv", csvPath}, {"access log", accessLog}} {
		decisions := filepath.Join(dir, "decisions-"+strings.ReplaceAll(in.name, " ", "-")+".csv")
		out, errOut, code := runCmd(t, "replay", "--config", cfgPath, "--decisions", decisions, in.path)
		if code != 0 {
			t.Fatalf("replay of the %s: exit %d: %s\n%s", in.name, code, errOut, out)
		}
		got := readStatuses(t, decisions)
		if len(got) != len(served) {
			t.Fatalf("replay of the %s decided %d requests, serve %d\n%s", in.name, len(got), len(served), out)
		}
		diffs := 0
		for i := range served {
			if got[i] != served[i] {
				diffs++
				if diffs <= 5 {
					t.Errorf("replay of the %s: request %d (%+v): status %d, serve answered %d", in.name, i+1, traffic[i], got[i], served[i])
				}
			}
		}
		if diffs > 0 {
			t.Errorf("replay of the %s: %d of %d statuses differ from serve's", in.name, diffs, len(served))
		}
		// The report names the keys refused: from the CSV as sent, from
		// serve's log by their hashes (a header only keys read is logged
		// hashed: it may be a credential).
		key := "header:X-Api-Key=key-"
		if in.name == "access log" {
			key = "header:X-Api-Key=" + apikey.Hash("key-0")
		}
		if !strings.Contains(out, key) || !strings.Contains(out, "ip=203.0.113.") {
			t.Errorf("replay of the %s: the report names no refused API key (%s) or client:\n%s", in.name, key, out)
		}
	}
}
