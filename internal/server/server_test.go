package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/store/memstore"
)

type running struct {
	gateway, admin string
	out, logs      *testenv.Buffer
	stop           func() error
}

var addrRE = regexp.MustCompile(`portero: (gateway|admin) listening on (https?://\S+)`)

// start runs server.Run on free loopback ports and waits for the printed
// addresses.
func start(t *testing.T, opts server.Options) *running {
	t.Helper()
	out, logs := &testenv.Buffer{}, &testenv.Buffer{}
	opts.Stdout = out
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.AdminListen == "" {
		opts.AdminListen = "127.0.0.1:0"
	}
	// Without a Hurry of the test's own, the drain is skipped at stop (as
	// a second Ctrl-C would), so that each test does not wait it out.
	var hurry chan struct{}
	if opts.Hurry == nil {
		hurry = make(chan struct{})
		opts.Hurry = hurry
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, opts) }()
	r := &running{out: out, logs: logs}
	stopped := false
	r.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		if hurry != nil {
			close(hurry)
		}
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return after cancel")
			return nil
		}
	}
	t.Cleanup(func() { r.stop() })
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range addrRE.FindAllStringSubmatch(out.String(), -1) {
			if m[1] == "gateway" {
				r.gateway = m[2]
			} else {
				r.admin = m[2]
			}
		}
		if r.gateway != "" && (r.admin != "" || opts.AdminListen == "off") {
			return r
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v\nlogs:\n%s", err, logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no addresses printed:\n%s", out)
	return nil
}

func get(t *testing.T, url string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestDefaultConfig is the newcomer's session: no flags, the embedded
// configuration, a demo upstream, and curl getting 429s.
func TestDefaultConfig(t *testing.T) {
	// A stopped clock, so that the bucket does not refill between requests
	// on a slow machine.
	t0 := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	r := start(t, server.Options{Now: func() time.Time { return t0 }})
	codes := map[int]int{}
	for range 15 {
		code, _, _ := get(t, r.gateway+"/")
		codes[code]++
	}
	if codes[200] != 10 || codes[429] != 5 {
		t.Errorf("15 quick requests: %v, want 10×200 (burst) then 429s", codes)
	}
	code, _, body := get(t, r.gateway+"/healthz")
	if code != 200 || body != "ok\n" {
		t.Errorf("healthz: %d %q", code, body)
	}
	if code, _, _ := get(t, r.gateway+"/readyz"); code != 200 {
		t.Errorf("readyz: %d", code)
	}
	_, _, metrics := get(t, r.admin+"/metrics")
	for _, want := range []string{
		`portero_decisions_total{outcome="refused",rule="per-client"} 5`,
		`portero_decisions_total{outcome="allowed",rule="per-client"}`,
		`portero_store_latency_seconds_count 15`,
		`portero_store_fallback 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(metrics, "127.0.0.1") {
		t.Error("a client key appears in the metrics")
	}
	_, _, refused := get(t, r.admin+"/api/refused")
	if !strings.Contains(refused, `"key": "ip=127.0.0.1/32"`) || !strings.Contains(refused, `"count": 5`) {
		t.Errorf("refused keys: %s", refused)
	}
	_, _, cfg := get(t, r.admin+"/config")
	if !strings.Contains(cfg, "per-client") || !strings.Contains(cfg, "built-in") {
		t.Errorf("config: %s", cfg)
	}
	// The dashboard samples once a second.
	waitFor(t, "the dashboard's state to show the rules and the refused key", func() bool {
		_, _, live := get(t, r.admin+"/dashboard/state")
		return strings.Contains(live, `"name":"per-client"`) && strings.Contains(live, `"key":"ip=127.0.0.1/32"`)
	})
	if code, hdr, _ := get(t, r.admin+"/"); code != http.StatusOK || !strings.Contains(hdr.Get("Content-Type"), "text/html") {
		t.Errorf("GET / = %d %s, want the dashboard (redirected)", code, hdr.Get("Content-Type"))
	}
	if code, _, _ := get(t, r.admin+"/api/keys?rule=per-client&key=x"); code != http.StatusNotImplemented && code != 200 {
		t.Errorf("keys API: %d", code)
	}
	if err := r.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as editors and Kubernetes do
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestReload: a bad file is refused with its errors logged and the running
// configuration kept whole; a good one applies, and unchanged rules keep
// their counters — under traffic.
func TestReload(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	defer up.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "portero.yaml")
	v1 := fmt.Sprintf(`
upstreams: {api: {url: %s}}
routes: [{upstream: api}]
rules:
  - {name: keep, key: ip, algorithm: fixed-window, limit: 1000/h}
  - {name: login, match: {methods: [POST], path: /login}, key: ip, algorithm: fixed-window, limit: 1/h}
`, up.URL)
	writeFile(t, path, v1)
	reload := make(chan struct{})
	r := start(t, server.Options{ConfigPath: path, Watch: true, Reload: reload})

	// Traffic during the reloads: every answer is 200 or 429, never an error.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad []string
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := http.Get(r.gateway + "/x")
			if err != nil {
				mu.Lock()
				bad = append(bad, err.Error())
				mu.Unlock()
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 && resp.StatusCode != 429 {
				mu.Lock()
				bad = append(bad, resp.Status)
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	_, h, _ := get(t, r.gateway+"/")
	if !strings.Contains(h.Get("RateLimit"), `"keep"`) {
		t.Fatalf("RateLimit = %q", h.Get("RateLimit"))
	}
	// A bad file (through the watcher): refused, errors logged with lines.
	writeFile(t, path, v1+"  - {name: broken, key: ip, limit: 0/min}\n")
	waitFor(t, "the refusal in the logs", func() bool { return strings.Contains(r.logs.String(), "rules[2].limit: 0/min") })
	if !strings.Contains(r.logs.String(), "portero.yaml:7") {
		t.Errorf("refusal log lacks the line number:\n%s", r.logs)
	}
	if _, h, _ := get(t, r.gateway+"/"); strings.Contains(h.Get("RateLimit-Policy"), "broken") {
		t.Error("bad configuration half-applied")
	}
	// Good file through SIGHUP's channel: login limit raised, keep unchanged.
	before := remaining(t, r.gateway)
	v2 := strings.Replace(v1, "limit: 1/h}", "limit: 5/h}", 1)
	if err := os.WriteFile(path, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	waitFor(t, "the new login limit", func() bool {
		_, _, cfg := get(t, r.admin+"/config")
		return strings.Contains(cfg, "limit: 5/h")
	})
	after := remaining(t, r.gateway)
	if after >= before || before-after > 50 {
		t.Errorf("keep's remaining went from %d to %d: counter lost across the reload", before, after)
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("requests failed during reloads: %v", bad[:min(len(bad), 5)])
	}
	_, _, m := get(t, r.admin+"/metrics")
	if !strings.Contains(m, `portero_config_reloads_total{result="error"}`) || !strings.Contains(m, `portero_config_reloads_total{result="ok"}`) {
		t.Errorf("reload metrics missing")
	}
}

var rRE = regexp.MustCompile(`"keep";r=(\d+)`)

func remaining(t *testing.T, gw string) int {
	t.Helper()
	_, h, _ := get(t, gw+"/")
	m := rRE.FindStringSubmatch(h.Get("RateLimit"))
	if m == nil {
		t.Fatalf("no keep in RateLimit %q", h.Get("RateLimit"))
	}
	var n int
	fmt.Sscan(m[1], &n)
	return n
}

// TestGracefulShutdown: a request in flight when the server is told to stop
// finishes; new connections are refused afterwards. The upstream answers
// only once the shutdown has begun, so that the request is in flight
// through it however slow the machine.
func TestGracefulShutdown(t *testing.T) {
	entered := make(chan struct{})
	var r *running
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		waitFor(t, "the shutdown", func() bool { return strings.Contains(r.logs.String(), "shutting down") })
		io.WriteString(w, "finished")
	}))
	defer up.Close()
	path := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, path, fmt.Sprintf("upstreams: {api: {url: %s}}\nroutes: [{upstream: api}]\n", up.URL))
	r = start(t, server.Options{ConfigPath: path, AdminListen: "off"})
	result := make(chan string, 1)
	go func() {
		resp, err := http.Get(r.gateway + "/slow")
		if err != nil {
			result <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		result <- fmt.Sprint(resp.StatusCode, " ", string(b))
	}()
	<-entered
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := <-result; got != "200 finished" {
		t.Errorf("in-flight request: %s", got)
	}
	if _, err := http.Get(r.gateway + "/"); err == nil {
		t.Error("still accepting after shutdown")
	}
}

func TestAdminToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, path, "admin: {token: s3cret}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n")
	r := start(t, server.Options{ConfigPath: path})
	if code, h, _ := get(t, r.admin+"/metrics"); code != 401 || h.Get("WWW-Authenticate") == "" {
		t.Errorf("without token: %d", code)
	}
	if code, _, _ := get(t, r.admin+"/metrics", "Authorization", "Bearer wrong"); code != 401 {
		t.Errorf("wrong token: %d", code)
	}
	code, _, cfg := get(t, r.admin+"/config", "Authorization", "Bearer s3cret")
	if code != 200 || strings.Contains(cfg, "s3cret") {
		t.Errorf("with token: %d, config shows the token: %v", code, strings.Contains(cfg, "s3cret"))
	}
}

func TestBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, path, "routes: [{upstream: nope}]\nrules: [{name: x, key: ip, limit: 0/min}]\n")
	err := server.Run(context.Background(), server.Options{ConfigPath: path, Listen: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:2:35: rules[0].limit") || !strings.Contains(err.Error(), "bad.yaml:1:21: routes[0].upstream") {
		t.Errorf("err = %v", err)
	}
	// A Redis URL that cannot be a URL is a configuration error; a Redis
	// that does not answer is not (TestStartWithRedisDown).
	path2 := filepath.Join(t.TempDir(), "redis.yaml")
	writeFile(t, path2, "store: {type: redis, url: 'redis://127.0.0.1:notaport/0'}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n")
	if err := server.Run(context.Background(), server.Options{ConfigPath: path2, Listen: "127.0.0.1:0"}); err == nil {
		t.Error("a malformed redis URL: no error")
	}
}

// TestReloadReopensStore: a reload opens a new store exactly when a setting
// the store is built from changes (its type, URL, max_keys, and for Redis
// the timeout), and keeps the store, with its counters, otherwise: on_error
// and local_share are the engine's, never the store's.
func TestReloadReopensStore(t *testing.T) {
	var mu sync.Mutex
	var opened []string
	open := func(cfg *config.Config, _ *slog.Logger) (portero.Store, error) {
		mu.Lock()
		opened = append(opened, fmt.Sprintf("%s %s %v %v", cfg.StoreType, cfg.OnError, cfg.LocalShare, cfg.StoreTimeout))
		mu.Unlock()
		return memstore.New(memstore.Config{}) // stands in for either type
	}
	opens := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(opened)
	}
	path := filepath.Join(t.TempDir(), "portero.yaml")
	const rest = "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules: [{name: r, key: ip, limit: %s}]\n"
	redis := func(store, limit string) string {
		return "store: {type: redis, url: 'redis://127.0.0.1:1/0', " + store + "}\n" + fmt.Sprintf(rest, limit)
	}
	memory := func(store, limit string) string {
		return "store: {type: memory" + store + "}\n" + fmt.Sprintf(rest, limit)
	}
	writeFile(t, path, redis("on_error: allow", "10/min"))
	reload := make(chan struct{})
	r := start(t, server.Options{ConfigPath: path, Reload: reload, OpenStore: open})
	for i, tt := range []struct {
		file  string
		opens int
	}{
		{redis("on_error: allow", "20/min"), 1}, // rules only
		{redis("on_error: deny", "20/min"), 1},  // the engine's failure policy
		{redis("on_error: local", "20/min"), 1},
		{redis("on_error: local, local_share: 0.5", "20/min"), 1},
		{redis("on_error: local, local_share: 0.5, timeout: 1s", "20/min"), 2},
		{redis("on_error: local, local_share: 0.5, timeout: 1s", "30/min"), 2},
		{memory("", "30/min"), 3},
		{memory(", on_error: deny", "30/min"), 3}, // the middleware answers 503; the memory store is the same
		{memory(", on_error: deny, max_keys: 10", "30/min"), 4},
	} {
		writeFile(t, path, tt.file)
		reloads := strings.Count(r.logs.String(), "configuration reloaded")
		reload <- struct{}{}
		waitFor(t, "the reload", func() bool { return strings.Count(r.logs.String(), "configuration reloaded") > reloads })
		if got := opens(); got != tt.opens {
			mu.Lock()
			t.Errorf("reload %d: %d stores opened, want %d: %q", i, got, tt.opens, opened)
			mu.Unlock()
		}
	}
}
