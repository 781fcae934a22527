package httplimit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/redisstore"
)

// leaseHolderEnv, when set to a Redis URL, makes the test binary the child
// of TestConcurrencyKilledInstance: a server whose every request holds a
// lease in Redis until the process dies.
const leaseHolderEnv = "PORTERO_TEST_LEASE_HOLDER"

const (
	holderPrefix = "killtest:"
	holderTTL    = 3 * time.Second
	holderMax    = 3
)

func TestMain(m *testing.M) {
	if url := os.Getenv(leaseHolderEnv); url != "" {
		os.Exit(leaseHolder(url))
	}
	os.Exit(m.Run())
}

// leaseHolder serves on a loopback port, printed on stdout, with the
// concurrency middleware over Redis in front of a handler that never
// returns.
func leaseHolder(url string) int {
	store, err := redisstore.New(redisstore.Config{URL: url, Prefix: holderPrefix, Timeout: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := httplimit.NewConcurrency(httplimit.ConcurrencyConfig{
		Rules: []httplimit.ConcurrencyRule{{Name: "held", Key: policy.MustParseKey("global"), Max: holderMax, TTL: holderTTL}},
		Store: store,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("listening http://%s\n", ln.Addr())
	http.Serve(ln, c.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {} // mid-request until the process is killed
	})))
	return 1
}

// TestConcurrencyKilledInstance: an instance holding leases in Redis
// through the middleware (a child process, three requests in flight)
// renews them past their TTL while it lives; killed with SIGKILL
// mid-request, it renews no more, no lease outlives the kill by more than
// the TTL (read from Redis's sorted set, on Redis's clock), and another
// instance gets all three slots back once they expire.
func TestConcurrencyKilledInstance(t *testing.T) {
	srv := redistest.Start(t)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), leaseHolderEnv+"="+srv.URL())
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			child.Process.Kill()
			child.Wait()
		}
	})
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(strings.TrimPrefix(line, "listening "))
		io.Copy(io.Discard, out)
	}()
	var base string
	select {
	case base = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatal("the child printed no address within 30 s")
	}
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("child printed %q", base)
	}
	for range holderMax {
		go func() {
			if resp, err := http.Get(base); err == nil {
				resp.Body.Close() // never: the handler does not return
			}
		}()
	}

	parent, err := redisstore.New(redisstore.Config{URL: srv.URL(), Prefix: holderPrefix, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close(context.Background())
	key := parent.LeaseKey("held", "global=*")
	rule := portero.ConcurrencyRule{Name: "held", Max: holderMax, TTL: holderTTL}
	scores := func() []int64 { return srv.Scores(t, key) }
	ttl := holderTTL.Microseconds()

	// All three requests are in flight, holding their leases.
	var t0 int64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if len(scores()) == holderMax {
			t0 = srv.Micros(t)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child's requests hold %d leases after 20 s, want %d", len(scores()), holderMax)
		}
	}
	if _, d, err := parent.Acquire(context.Background(), time.Time{}, rule, "global=*"); err != nil || d.Allowed {
		t.Fatalf("another instance's Acquire with %d held = %+v, %v; want refused", holderMax, d, err)
	}
	// While the child lives its leases outlast their first TTL: renewed.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		s := scores()
		if len(s) == holderMax && slices.Min(s) > t0+ttl {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leases %v never all expired after %d µs (first seen at %d + TTL): not renewed", s, t0+ttl, t0)
		}
	}

	child.Process.Kill()
	child.Wait()
	killed = true
	tk := srv.Micros(t)
	held := scores()
	if len(held) == 0 {
		t.Fatal("no leases left right after the kill")
	}
	if mx := slices.Max(held); mx > tk+ttl {
		t.Errorf("a lease expires at %d µs, %d µs after the kill at %d: longer than the %v lease", mx, mx-tk, tk, holderTTL)
	}
	got := 0
	for deadline := time.Now().Add(holderTTL + 20*time.Second); got < holderMax; time.Sleep(20 * time.Millisecond) {
		_, d, err := parent.Acquire(context.Background(), time.Time{}, rule, "global=*")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			got++
			if now := srv.Micros(t); now < slices.Min(held) {
				t.Errorf("a slot came back at %d µs, before the earliest lease expired at %d", now, slices.Min(held))
			}
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slots back %v after the kill, want all within the %v lease", got, holderMax, holderTTL+20*time.Second, holderTTL)
		}
	}
	t.Logf("killed at %d µs; leases expired by %d µs (TTL %v); all %d slots taken by another instance", tk, slices.Max(held), holderTTL, holderMax)
}
