package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/lifecycle"
	"github.com/portero-rl/portero/internal/logging"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/watch"
	"github.com/portero-rl/portero/store/memstore"
)

// TestStartWithRedisDown: `portero serve` starts while Redis is down,
// serves under store.on_error, says so in its log, is not ready only under
// deny, and switches to Redis by itself once a real redis-server answers.
func TestStartWithRedisDown(t *testing.T) {
	for _, tt := range []struct {
		onError string
		status  int  // of a request while Redis is down
		ready   bool // /readyz while Redis is down
	}{
		{"allow", 200, true},
		{"deny", 503, false},
		{"local", 200, true},
	} {
		t.Run(tt.onError, func(t *testing.T) {
			srv := redistest.Start(t)
			srv.Kill() // its address, nothing answering
			path := filepath.Join(t.TempDir(), "p.yaml")
			writeFile(t, path, fmt.Sprintf(`store: {type: redis, url: %q, on_error: %s, timeout: 2s}
upstreams: {d: {type: demo}}
routes: [{upstream: d}]
rules: [{name: r, key: ip, algorithm: fixed-window, limit: 3/h}]
`, srv.URL(), tt.onError))
			r := start(t, server.Options{ConfigPath: path, AdminListen: "off"})
			if !strings.Contains(r.logs.String(), "redis does not answer yet") {
				t.Errorf("the log does not say Redis is down:\n%s", r.logs)
			}
			// The listener answers before serve has finished starting
			// ("not ready: starting"): ask until it has.
			code, _, body := get(t, r.gateway+"/readyz")
			for deadline := time.Now().Add(10 * time.Second); strings.Contains(body, "starting") && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
				code, _, body = get(t, r.gateway+"/readyz")
			}
			if (code == 200) != tt.ready {
				t.Errorf("/readyz while Redis is down = %d %q, want ready %v", code, body, tt.ready)
			}
			if code, _, _ := get(t, r.gateway+"/"); code != tt.status {
				t.Errorf("a request while Redis is down = %d, want %d", code, tt.status)
			}
			// A refusal of the failure policy is logged as one, not as the
			// rule's own refusal of the client.
			if logs := r.logs.String(); strings.Contains(logs, "msg=refused ") ||
				tt.onError == "deny" && !strings.Contains(logs, `msg="refused by the failure policy: the store is unavailable" rule=r on_error=deny`) {
				t.Errorf("the log of a request while Redis is down under %s:\n%s", tt.onError, logs)
			}

			srv.Restart()
			// Redis counts once the store has connected: the first request
			// that leaves a key there, then exactly the limit.
			deadline := time.Now().Add(20 * time.Second)
			for {
				get(t, r.gateway+"/")
				if n, _ := redistest.Do(srv.Addr(), "DBSIZE"); n != "0" && n != "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis counts nothing 20 s after it started:\n%s", r.logs)
				}
				time.Sleep(20 * time.Millisecond)
			}
			var codes []int
			for range 3 {
				c, _, _ := get(t, r.gateway+"/")
				codes = append(codes, c)
			}
			if fmt.Sprint(codes) != "[200 200 429]" {
				t.Errorf("after Redis answers, the next three requests = %v, want [200 200 429] (3/h counted in Redis)", codes)
			}
			if code, _, body := get(t, r.gateway+"/readyz"); code != 200 {
				t.Errorf("/readyz with Redis up = %d %q", code, body)
			}
		})
	}
}

// countingStores opens memory stores and counts how many are open.
type countingStores struct{ opened, closed atomic.Int64 }

type countedStore struct {
	*memstore.Store
	c *countingStores
}

func (s countedStore) Close(ctx context.Context) error {
	s.c.closed.Add(1)
	return s.Store.Close(ctx)
}

func (c *countingStores) open(cfg *config.Config, _ *slog.Logger) (portero.Store, error) {
	st, err := memstore.New(memstore.Config{MaxKeys: cfg.MaxKeys})
	if err != nil {
		return nil, err
	}
	c.opened.Add(1)
	return countedStore{st, c}, nil
}

// TestReloadClosesReplacedStores reloads, under traffic, configurations
// whose store section changes, and checks that each replaced store is
// closed once its requests are done, while the server runs: no memstore
// sweeper goroutine of a replaced store is left (goleak), nor any Redis
// client of one (CLIENT LIST).
func TestReloadClosesReplacedStores(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		stores := &countingStores{}
		path := filepath.Join(t.TempDir(), "p.yaml")
		conf := func(i int) string {
			return fmt.Sprintf("store: {type: memory, max_keys: %d}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules: [{name: r, key: ip, limit: 1000000/h}]\n", 1000+i)
		}
		writeFile(t, path, conf(0))
		reload := make(chan struct{})
		r := start(t, server.Options{ConfigPath: path, Reload: reload, OpenStore: stores.open, AdminListen: "off"})
		http.DefaultClient.CloseIdleConnections()
		base := goleak.IgnoreCurrent() // the running server, its first store's sweeper included
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if code, _, _ := get(t, r.gateway+"/"); code != 200 {
						failed.Add(1)
					}
				}
			})
		}
		const reloads = 60
		for i := 1; i <= reloads; i++ {
			writeFile(t, path, conf(i))
			before := strings.Count(r.logs.String(), "configuration reloaded")
			reload <- struct{}{}
			waitFor(t, "the reload", func() bool { return strings.Count(r.logs.String(), "configuration reloaded") > before })
		}
		close(stop)
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Errorf("%d requests failed during the reloads", n)
		}
		waitFor(t, "the replaced stores to close", func() bool { return stores.closed.Load() == stores.opened.Load()-1 })
		if o, c := stores.opened.Load(), stores.closed.Load(); o != reloads+1 {
			t.Errorf("%d stores opened for %d reloads, want %d", o, reloads, reloads+1)
		} else {
			t.Logf("%d reloads: %d stores opened, %d closed while running", reloads, o, c)
		}
		http.DefaultClient.CloseIdleConnections()
		var sweepers int
		waitFor(t, "no leaked sweeper", func() bool {
			sweepers = 0
			if err := goleak.Find(base); err != nil {
				sweepers = strings.Count(err.Error(), "on top of the stack:\ngithub.com/portero-rl/portero/store/memstore.(*Store).sweeper")
			}
			return sweepers <= 1 // the running store's, new since the snapshot
		})
		t.Logf("memstore sweepers running after the reloads: %d", sweepers)
		if err := r.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		// clientIDs lists the ids of the clients connected, but for the
		// one asking. Redis numbers clients in the order they connect, so
		// a client whose id is at most one taken before a store opened
		// belongs to an older store; how many connections each store
		// opens, and when, does not matter.
		clientIDs := func() []int64 {
			out, err := redistest.Do(srv.Addr(), "CLIENT", "LIST")
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var id int64
				if _, err := fmt.Sscanf(line, "id=%d ", &id); err == nil && !strings.Contains(line, " cmd=client|list ") {
					ids = append(ids, id)
				}
			}
			return ids
		}
		path := filepath.Join(t.TempDir(), "p.yaml")
		conf := func(i int) string {
			return fmt.Sprintf("store: {type: redis, url: %q, timeout: %dms}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules: [{name: r, key: ip, limit: 1000000/h}]\n", srv.URL(), 1000+i)
		}
		writeFile(t, path, conf(0))
		reload := make(chan struct{})
		r := start(t, server.Options{ConfigPath: path, Reload: reload, AdminListen: "off"})
		get(t, r.gateway+"/")
		const reloads = 40
		var older int64 // the newest id before the last store opened
		for i := 1; i <= reloads; i++ {
			writeFile(t, path, conf(i))
			if i == reloads {
				older = slices.Max(append(clientIDs(), 0))
			}
			before := strings.Count(r.logs.String(), "configuration reloaded")
			reload <- struct{}{}
			waitFor(t, "the reload", func() bool { return strings.Count(r.logs.String(), "configuration reloaded") > before })
			get(t, r.gateway+"/")
		}
		var left []int64
		waitFor(t, "the replaced stores' clients to go", func() bool {
			left = slices.DeleteFunc(clientIDs(), func(id int64) bool { return id > older })
			return len(left) == 0
		})
		t.Logf("after %d reloads no client of a replaced store is left (ids up to %d), %d clients of the running one", reloads, older, len(clientIDs()))
	})
}

// kubelet publishes content in dir as the kubelet updates a mounted
// ConfigMap: a new timestamped directory, a ..data_tmp symlink to it
// renamed over ..data, the old directory removed; dir/NAME is a symlink to
// ..data/NAME that never changes.
func kubelet(t *testing.T, dir, name, content string, gen int) {
	t.Helper()
	ts := fmt.Sprintf("..2026_05_01_10_00_%02d.123456789", gen)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, ts), 0o755))
	must(os.WriteFile(filepath.Join(dir, ts, name), []byte(content), 0o644))
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	must(os.Symlink(ts, filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	if old != "" {
		must(os.RemoveAll(filepath.Join(dir, old)))
	} else {
		must(os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
	}
}

// TestWatchKubernetesConfigMap: `serve --watch` on a file of a mounted
// ConfigMap reloads once per kubelet update, with the new content, from
// file notifications alone (the poll is off). Before, the watcher looked
// only for events naming the file: 5 events, 0 reloads.
func TestWatchKubernetesConfigMap(t *testing.T) {
	dir := t.TempDir()
	conf := func(limit string) string {
		return "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules: [{name: r, key: ip, limit: " + limit + "}]\n"
	}
	kubelet(t, dir, "portero.yaml", conf("10/min"), 1)
	r := start(t, server.Options{ConfigPath: filepath.Join(dir, "portero.yaml"), Watch: true,
		WatchOptions: watch.Options{Settle: 20 * time.Millisecond, Poll: -1}})
	reloads := func() int { return strings.Count(r.logs.String(), "configuration reloaded") }
	for i, limit := range []string{"20/min", "30/min"} {
		kubelet(t, dir, "portero.yaml", conf(limit), i+2)
		waitFor(t, "the reload of "+limit, func() bool { return reloads() >= i+1 })
		if _, _, cfg := get(t, r.admin+"/config"); !strings.Contains(cfg, "limit: "+limit) {
			t.Fatalf("after update %d the configuration is not the new one:\n%s", i+2, cfg)
		}
		if n := reloads(); n != i+1 {
			t.Fatalf("after %d updates, %d reloads:\n%s", i+1, n, r.logs)
		}
	}
}

// TestDrainThenShutdown: on stop, /readyz answers 503 for the drain period
// while requests are still served, and only then do the listeners close.
// Before, the listener closed at once and /readyz never said 503.
func TestDrainThenShutdown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, path, "server: {drain_period: 1s, shutdown_timeout: 5s}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n")
	r := start(t, server.Options{ConfigPath: path, AdminListen: "off", Hurry: make(chan struct{})})
	if code, _, _ := get(t, r.gateway+"/readyz"); code != 200 {
		t.Fatalf("/readyz before stopping = %d", code)
	}
	stopped := make(chan error, 1)
	began := time.Now()
	go func() { stopped <- r.stop() }()
	var ready503, served bool
	var body string
	for !ready503 || !served {
		resp, err := http.Get(r.gateway + "/readyz")
		if err != nil {
			t.Fatalf("a connection refused %v after stopping, before /readyz said 503 (%v) and a request was served (%v): %v",
				time.Since(began), ready503, served, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 503 {
			ready503, body = true, string(b)
			if code, _, _ := get(t, r.gateway+"/"); code == 200 {
				served = true
			}
		}
	}
	if !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz while draining: %q", body)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run: %v", err)
	}
	if took := time.Since(began); took < time.Second {
		t.Errorf("Run returned %v after the stop, before the 1 s drain period ended", took)
	}
	if _, err := http.Get(r.gateway + "/"); err == nil {
		t.Error("still accepting after shutdown")
	}
}

// TestShutdownCutIsAnError: when shutdown_timeout passes with a request
// still in flight, Run says so (lifecycle.ErrInterrupted), and serve exits
// non-zero. Before, Run returned nil.
func TestShutdownCutIsAnError(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	}))
	defer up.Close()
	defer close(release)
	path := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, path, fmt.Sprintf("server: {drain_period: 0s, shutdown_timeout: 200ms}\nupstreams: {api: {url: %s}}\nroutes: [{upstream: api}]\n", up.URL))
	r := start(t, server.Options{ConfigPath: path, AdminListen: "off"})
	go http.Get(r.gateway + "/slow")
	<-entered
	err := r.stop()
	if !errors.Is(err, lifecycle.ErrInterrupted) {
		t.Errorf("Run after cutting a request = %v, want lifecycle.ErrInterrupted", err)
	}
}

// TestRefusalLogsSampled: refusals are logged at INFO, at most N lines a
// second per rule, each saying how many it stands for; shadow refusals
// alike.
func TestRefusalLogsSampled(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	path := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, path, `upstreams: {d: {type: demo}}
routes: [{upstream: d}]
rules:
  - {name: strict, key: ip, algorithm: fixed-window, limit: 1/h}
  - {name: watch, key: ip, algorithm: fixed-window, limit: 1/h, mode: shadow}
`)
	r := start(t, server.Options{ConfigPath: path, AdminListen: "off", Now: clock, LogSampler: logging.NewSampler(2)})
	for range 20 {
		get(t, r.gateway+"/")
	}
	lines := func(msg string) []string {
		var out []string
		for _, l := range strings.Split(r.logs.String(), "\n") {
			if strings.Contains(l, "msg="+msg) {
				out = append(out, l)
			}
		}
		return out
	}
	refused, shadow := lines("refused"), lines(`"shadow rule would refuse"`)
	if len(refused) != 2 || len(shadow) != 2 {
		t.Fatalf("19 refusals and 19 shadow refusals in one second gave %d and %d lines, want 2 each:\n%s", len(refused), len(shadow), r.logs)
	}
	for _, l := range append(refused, shadow...) {
		if !strings.Contains(l, "level=INFO") || !strings.Contains(l, "suppressed=0") {
			t.Errorf("line %q: want INFO with suppressed=0", l)
		}
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	get(t, r.gateway+"/")
	refused, shadow = lines("refused"), lines(`"shadow rule would refuse"`)
	if len(refused) != 3 || !strings.Contains(refused[2], "suppressed=17") || len(shadow) != 3 || !strings.Contains(shadow[2], "suppressed=17") {
		t.Errorf("the first lines of the next second: %q, %q; want suppressed=17 for the 17 held back", refused[len(refused)-1], shadow[len(shadow)-1])
	}
}

// TestAdminAnswers: /config shows the listen addresses in effect (here
// ports the system chose), and /api/refused refuses a minutes value that
// is not one with a problem body.
func TestAdminAnswers(t *testing.T) {
	r := start(t, server.Options{})
	_, _, cfg := get(t, r.admin+"/config")
	for _, want := range []string{"listen: " + strings.TrimPrefix(r.gateway, "http://"), "listen: " + strings.TrimPrefix(r.admin, "http://")} {
		if !strings.Contains(cfg, want) {
			t.Errorf("/config lacks %q:\n%s", want, cfg)
		}
	}
	for _, q := range []string{"abc", "0", "16", "-1", "1.5"} {
		code, h, body := get(t, r.admin+"/api/refused?minutes="+q)
		if code != 400 || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"status":400`) || !strings.Contains(body, "minutes") {
			t.Errorf("/api/refused?minutes=%s = %d %s %s, want 400 with a problem body", q, code, h.Get("Content-Type"), body)
		}
	}
	if code, _, _ := get(t, r.admin+"/api/refused?minutes=15"); code != 200 {
		t.Errorf("/api/refused?minutes=15 = %d, want 200", code)
	}
}
