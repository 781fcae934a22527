package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/server"
)

// serveEnv, when set to a configuration file, makes the test binary the
// child of TestConcurrencyLeasesKilledInstance: `portero serve` on that
// file (server.Run), its gateway address printed on stdout.
const serveEnv = "PORTERO_TEST_SERVE_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(serveEnv); path != "" {
		err := server.Run(context.Background(), server.Options{ConfigPath: path, Listen: "127.0.0.1:0", AdminListen: "off",
			Stdout: os.Stdout, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

const (
	killTTL = 3 * time.Second
	killMax = 3
)

// TestConcurrencyLeasesKilledInstance: concurrency leases in a real
// redis-server, through the gateway's configuration (a global concurrency
// rule of 3, lease TTL 3 s). A child process runs `portero serve` on that
// file; three requests hang in it, each holding a lease it renews — past
// the TTL, while the child lives — so that a second instance (in this
// process, the same file) is refused with 503 by the service's limit. The
// child is killed with SIGKILL mid-request: no lease outlives the kill by
// more than the TTL (read from Redis's sorted set, on Redis's clock), no
// slot comes back before the earliest lease expires, and the second
// instance then admits three requests again. The upstream, like most,
// goes on with a request whose client has gone: it then serves 6, twice
// the limit — the inherent overlap of a ttl shorter than the upstream's
// service time (docs/concurrency.md).
func TestConcurrencyLeasesKilledInstance(t *testing.T) {
	srv := redistest.Start(t)
	hang := make(chan struct{})
	entered := make(chan struct{}, 16)
	var inFlight atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		entered <- struct{}{}
		<-hang // the request's context is not watched: the work goes on
	}))
	defer up.Close()
	defer close(hang)
	dir := t.TempDir()
	path := filepath.Join(dir, "portero.yaml")
	writeFile(t, path, fmt.Sprintf(`
store: {type: redis, url: %q, on_error: deny, timeout: 1s}
upstreams: {api: {url: %q, timeout: 5m}}
routes: [{upstream: api}]
rules:
  - name: held
    key: global
    concurrency: {max: %d, ttl: %s}
`, srv.URL(), up.URL, killMax, killTTL))

	childURL, kill := startChild(t, path)
	for range killMax {
		go func() {
			if resp, err := http.Get(childURL); err == nil {
				resp.Body.Close() // only after the kill: the upstream hangs
			}
		}()
		<-entered
	}

	scores := func() []int64 { return srv.Scores(t, "portero:{global=*}:lease:held") }
	ttl := killTTL.Microseconds()
	var t0 int64
	waitFor(t, "the child's three requests holding leases", func() bool {
		if len(scores()) == killMax {
			t0 = srv.Micros(t)
			return true
		}
		return false
	})

	second := start(t, server.Options{ConfigPath: path})
	if code, _, body := get(t, second.gateway); code != 503 || !strings.Contains(body, `allows 3 requests in flight`) || !strings.Contains(body, `"violated-policies":["held"]`) {
		t.Errorf("second instance with the child's 3 in flight: %d %s; want 503 by the service's limit", code, body)
	}
	// While the child lives its leases outlast their first TTL: renewed.
	waitFor(t, "the child's leases renewed past their first TTL", func() bool {
		s := scores()
		return len(s) == killMax && slices.Min(s) > t0+ttl
	})

	kill()
	tk := srv.Micros(t)
	held := scores()
	if len(held) == 0 {
		t.Fatal("no leases left right after the kill")
	}
	if mx := slices.Max(held); mx > tk+ttl {
		t.Errorf("a lease expires at %d µs, %d µs after the kill at %d: longer than the %v lease", mx, mx-tk, tk, killTTL)
	}
	// The slots come back at the leases' expiry, not before: the second
	// instance admits three at once (each held by the hanging upstream).
	slotsBack(t, second.gateway, entered, func() {
		if now := srv.Micros(t); now < slices.Min(held) {
			t.Errorf("a slot came back at %d µs, before the earliest lease expired at %d", now, slices.Min(held))
		}
	})
	if n := len(scores()); n != killMax {
		t.Errorf("%d leases in Redis with the second instance's 3 requests in flight, want 3", n)
	}
	if n := inFlight.Load(); n != 2*killMax {
		t.Errorf("the upstream serves %d requests, want %d: the killed child's %d, still running, and the second instance's %d", n, 2*killMax, killMax, killMax)
	}
	t.Logf("killed at %d µs; the child's leases expired by %d µs (TTL %v); all %d slots taken by the second instance", tk, slices.Max(held), killTTL, killMax)
}

// startChild runs `portero serve` on the configuration at path in a child
// process and returns its gateway's URL and what kills it (SIGKILL).
func startChild(t *testing.T, path string) (url string, kill func()) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), serveEnv+"="+path)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() { once.Do(func() { child.Process.Kill(); child.Wait() }) }
	t.Cleanup(kill)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil && m[1] == "gateway" {
				addr <- m[2]
			}
		}
	}()
	select {
	case url = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatal("the child printed no gateway address within 30 s")
	}
	return url, kill
}

// slotsBack asks url until killMax requests are admitted (they reach the
// upstream, which tells entered, and hang there), each refused one answered
// 503 meanwhile; admitted runs for each admission.
func slotsBack(t *testing.T, url string, entered <-chan struct{}, admitted func()) {
	t.Helper()
	got := 0
	for deadline := time.Now().Add(killTTL + 20*time.Second); got < killMax; time.Sleep(20 * time.Millisecond) {
		ch := make(chan int, 1)
		go func() {
			resp, err := http.Get(url)
			if err != nil {
				ch <- 0
				return
			}
			resp.Body.Close()
			ch <- resp.StatusCode
		}()
		select {
		case code := <-ch:
			if code != 503 {
				t.Fatalf("second instance after the kill: %d, want 503 until a slot is back", code)
			}
		case <-entered:
			admitted()
			got++
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slots back %v after the kill, want all within the %v lease", got, killMax, killTTL+20*time.Second, killTTL)
		}
	}
}
