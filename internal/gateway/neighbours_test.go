package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/overload"
)

// heldUpstream is a real upstream that holds every request until it is
// released, and counts the requests it saw by path.
type heldUpstream struct {
	*httptest.Server
	entered chan string
	release chan struct{}
	mu      sync.Mutex
	seen    map[string]int
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	t.Helper()
	u := &heldUpstream{entered: make(chan string, 100), release: make(chan struct{}), seen: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen[r.URL.Path]++
		u.mu.Unlock()
		u.entered <- r.URL.Path + " " + r.Header.Get("X-Tenant") + r.Header.Get("X-Key")
		<-u.release
		_, _ = io.WriteString(w, "done\n")
	}))
	t.Cleanup(func() {
		select {
		case <-u.release:
		default:
			close(u.release)
		}
		u.Server.Close()
	})
	return u
}

func (u *heldUpstream) count(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[path]
}

// async sends a request in the background; its status (0 on a transport
// error) arrives on the channel.
func async(url string, hdr ...string) <-chan int {
	ch := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ch <- resp.StatusCode
	}()
	return ch
}

// waitFor polls cond (the state of a real server, reached in its own time)
// until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

func problemOf(t *testing.T, body string) httplimit.Problem {
	t.Helper()
	var p httplimit.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return p
}

// spyBody records whether anything read it.
type spyBody struct{ read atomic.Bool }

func (s *spyBody) Read(p []byte) (int, error) {
	s.read.Store(true)
	return copy(p, "x"), io.EOF
}

// TestGatewaySheds: the overload section sheds outermost — before the body
// is read, before the rate limiter counts and before the upstream is
// touched — with 503 temporary-reduced-capacity and Retry-After; the
// critical class finds the slot reserved for it; health endpoints are
// never shed.
func TestGatewaySheds(t *testing.T) {
	up := newHeldUpstream(t)
	g, srv, _ := gw(t, fmt.Sprintf(`
upstreams: {api: {url: %s}}
routes: [{upstream: api}]
rules:
  - name: per-ip
    key: ip
    algorithm: fixed-window
    limit: 100/min
  - name: checkout
    match: {path: /checkout}
    priority: critical
overload:
  max_in_flight: 2
  reserve: {critical: 1}
  retry_after: 3s
`, up.URL))
	first := async(srv.URL + "/a")
	<-up.entered // the one slot a default request may take
	resp, body := get(t, srv.URL+"/b")
	p := problemOf(t, body)
	if resp.StatusCode != 503 || p.Type != httplimit.ProblemTemporaryReducedCapacity || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("default request, full: %d Retry-After %q %s; want 503 temporary-reduced-capacity, 3", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp.Header.Get("RateLimit") != "" {
		t.Errorf("a shed request has RateLimit %q: the limiter ran", resp.Header.Get("RateLimit"))
	}
	// Its body is not read: with Expect: 100-continue the client waits for
	// the server's go-ahead, and gets the 503 instead.
	spy := &spyBody{}
	req, _ := http.NewRequest("POST", srv.URL+"/b", spy)
	req.ContentLength = 1
	req.Header.Set("Expect", "100-continue")
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	if resp, err := client.Do(req); err != nil || resp.StatusCode != 503 {
		t.Errorf("POST while full: %v, %v; want 503", resp, err)
	} else {
		resp.Body.Close()
	}
	if spy.read.Load() {
		t.Error("the shed request's body was read")
	}
	if up.count("/b") != 0 {
		t.Error("the upstream saw a shed request")
	}
	crit := async(srv.URL + "/checkout")
	<-up.entered
	if resp, _ := get(t, srv.URL+"/readyz"); resp.StatusCode != 200 {
		t.Errorf("/readyz at capacity: %d", resp.StatusCode)
	}
	st := g.Gate().Stats()
	close(up.release)
	if a, c := <-first, <-crit; a != 200 || c != 200 {
		t.Errorf("admitted: %d and critical %d, want 200", a, c)
	}
	if st.InFlight != 2 || st.Refused[overload.Full] != 2 {
		t.Errorf("gate stats %+v: want 2 in flight, 2 refused as full", st)
	}
	// The rate limit counted the two admitted requests only.
	resp, _ = get(t, srv.URL+"/c")
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"per-ip";r=97;`) {
		t.Errorf("RateLimit after 2 admitted and 2 shed = %q, want r=97 (the shed ones uncounted)", got)
	}
}

// TestGatewayConcurrencyRules: a client's concurrency limit refuses with
// 429 and the service's with 503, both with their RateLimit items beside
// the rate rule's, from one writer.
func TestGatewayConcurrencyRules(t *testing.T) {
	up := newHeldUpstream(t)
	_, srv, _ := gw(t, fmt.Sprintf(`
upstreams: {api: {url: %s}}
routes: [{upstream: api}]
rules:
  - name: per-ip
    key: ip
    algorithm: fixed-window
    limit: 100/min
  - name: per-key
    key: header:X-Key
    concurrency: {max: 1}
  - name: service
    key: global
    concurrency: {max: 2, ttl: 30s}
`, up.URL))
	a := async(srv.URL+"/", "X-Key", "a")
	<-up.entered
	resp, body := get(t, srv.URL+"/", "X-Key", "a")
	if p := problemOf(t, body); resp.StatusCode != 429 || fmt.Sprint(p.ViolatedPolicies) != "[per-key]" || resp.Header.Get("RateLimit") != `"per-key";r=0` {
		t.Errorf("a's second: %d RateLimit %q %s; want 429 by per-key", resp.StatusCode, resp.Header.Get("RateLimit"), body)
	}
	b := async(srv.URL+"/", "X-Key", "b")
	<-up.entered
	resp, body = get(t, srv.URL+"/", "X-Key", "c")
	if p := problemOf(t, body); resp.StatusCode != 503 || p.Type != httplimit.ProblemTemporaryReducedCapacity || fmt.Sprint(p.ViolatedPolicies) != "[service]" {
		t.Errorf("c with the service full: %d %s; want 503 by service", resp.StatusCode, body)
	}
	close(up.release)
	if <-a != 200 || <-b != 200 {
		t.Error("admitted requests failed")
	}
	resp, _ = get(t, srv.URL+"/", "X-Key", "a")
	if got := resp.Header.Values("RateLimit-Policy"); fmt.Sprint(got) != `["per-ip";q=100;w=60, "per-key";q=1;qu="concurrent-requests", "service";q=2;qu="concurrent-requests"]` {
		t.Errorf("RateLimit-Policy = %q, want the three rules", got)
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasSuffix(got, `, "per-key";r=0, "service";r=1`) || !strings.HasPrefix(got, `"per-ip";r=`) {
		t.Errorf("RateLimit = %q, want the rate and both concurrency items", got)
	}
}

// TestGatewayQueueAndShape: a concurrency rule's queue lets the second
// request of a key wait for the first's slot; a shaped leaky-queue rule
// refuses at once a request its hold would keep longer than max_delay.
func TestGatewayQueueAndShape(t *testing.T) {
	up := newHeldUpstream(t)
	g, srv, _ := gw(t, fmt.Sprintf(`
upstreams: {api: {url: %s}}
routes: [{upstream: api}]
rules:
  - name: per-key
    key: header:X-Key
    concurrency: {max: 1}
    queue: {size: 1, timeout: 1m}
  - name: smooth
    match: {path: /smooth}
    key: ip
    algorithm: leaky-queue
    limit: 1/s burst 5
    shape: {max_delay: 100ms}
`, up.URL))
	first := async(srv.URL+"/", "X-Key", "a")
	<-up.entered
	second := async(srv.URL+"/", "X-Key", "a") // waits in the queue
	waitFor(t, "the second waiting", func() bool { return g.Limiter().Waiting() == 1 })
	third := async(srv.URL+"/", "X-Key", "a") // the queue of 1 is full: 429 at once
	if code := <-third; code != 429 {
		t.Errorf("third with the queue full: %d, want 429", code)
	}
	select {
	case code := <-second:
		t.Fatalf("the queued request was answered %d before the slot came back", code)
	default:
	}
	up.release <- struct{}{} // the first ends; the second gets its slot
	if <-first != 200 {
		t.Error("first failed")
	}
	if got := <-up.entered; got != "/ a" {
		t.Errorf("the upstream then saw %q, want the queued request", got)
	}
	up.release <- struct{}{}
	if code := <-second; code != 200 {
		t.Errorf("the queued request: %d, want 200", code)
	}
	// The queue's first place departs in 1 s: held longer than 100 ms, so
	// refused now with the rule's 429.
	resp, body := get(t, srv.URL+"/smooth")
	if p := problemOf(t, body); resp.StatusCode != 429 || fmt.Sprint(p.ViolatedPolicies) != "[smooth]" {
		t.Errorf("shaped beyond max_delay: %d %s, want 429 by smooth", resp.StatusCode, body)
	}
}

// TestGatewayFairShedding: with a full queue the heaviest tenant gives up
// its newest waiter to a light tenant's newcomer.
func TestGatewayFairShedding(t *testing.T) {
	up := newHeldUpstream(t)
	g, srv, _ := gw(t, fmt.Sprintf(`
upstreams: {api: {url: %s}}
routes: [{upstream: api}]
overload:
  max_in_flight: 1
  queue: {size: 2}
  shedding: fair
  tenant: header:X-Tenant
`, up.URL))
	running := async(srv.URL+"/", "X-Tenant", "big")
	<-up.entered
	waiting := func(n int) func() bool { return func() bool { return g.Gate().Stats().Waiting == n } }
	big1 := async(srv.URL+"/1", "X-Tenant", "big")
	waitFor(t, "big's first waiter", waiting(1))
	big2 := async(srv.URL+"/2", "X-Tenant", "big")
	waitFor(t, "big's second waiter", waiting(2))
	small := async(srv.URL+"/small", "X-Tenant", "small")
	if code := <-big2; code != 503 {
		t.Errorf("big's newest waiter when small came: %d, want 503 (pushed out)", code)
	}
	close(up.release)
	for name, ch := range map[string]<-chan int{"running": running, "big1": big1, "small": small} {
		if code := <-ch; code != 200 {
			t.Errorf("%s: %d, want 200", name, code)
		}
	}
	if st := g.Gate().Stats(); st.Refused[overload.Evicted] != 1 || st.Started != 3 {
		t.Errorf("gate stats %+v: want one evicted, three started", st)
	}
}

// TestGatewayReloadKeepsNeighbours: a reload that changes the overload
// section and a concurrency rule while requests run and wait drops none of
// them and counts none twice: the requests running and queued in the old
// Gate finish there (every one answered 200, none refused), the leases
// they hold count under the new maximum (lowered to what is held: a new
// request of that key is refused), and once all are done every slot is
// free again.
func TestGatewayReloadKeepsNeighbours(t *testing.T) {
	up := newHeldUpstream(t)
	src := func(maxInFlight, conc int) string {
		return fmt.Sprintf(`
upstreams: {api: {url: %s}}
routes: [{upstream: api}]
rules:
  - name: per-key
    key: header:X-Key
    concurrency: {max: %d}
overload:
  max_in_flight: %d
  queue: {size: 4}
`, up.URL, conc, maxInFlight)
	}
	g, srv, store := gw(t, src(2, 3))
	oldGate := g.Gate()
	var old []<-chan int
	for range 2 {
		old = append(old, async(srv.URL+"/", "X-Key", "k"))
		<-up.entered
	}
	for i := range 2 {
		old = append(old, async(srv.URL+"/", "X-Key", "k"))
		waitFor(t, "queued in the old gate", func() bool { return oldGate.Stats().Waiting == i+1 })
	}
	cfg, err := config.Parse("reload.yaml", []byte(src(3, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Update(cfg, store); err != nil {
		t.Fatal(err)
	}
	if g.Gate() == oldGate {
		t.Fatal("a changed overload section kept the old Gate")
	}
	// New requests go to the new Gate; the key holds 2 leases, the new
	// maximum: refused, not admitted as if the old ones were gone.
	resp, body := get(t, srv.URL+"/", "X-Key", "k")
	if resp.StatusCode != 429 {
		t.Errorf("a new request of the key after the reload: %d %s, want 429 (its 2 leases still count)", resp.StatusCode, body)
	}
	other := async(srv.URL+"/", "X-Key", "other")
	<-up.entered
	close(up.release)
	for i, ch := range old {
		if code := <-ch; code != 200 {
			t.Errorf("old request %d: %d, want 200", i, code)
		}
	}
	if code := <-other; code != 200 {
		t.Errorf("new request of another key: %d", code)
	}
	st := oldGate.Stats()
	if st.Started != 4 || st.Finished != 4 || st.InFlight != 0 || st.Waiting != 0 || st.Refused != ([overload.Unhealthy + 1]int64{}) {
		t.Errorf("old gate %+v: want 4 started and finished, none refused, nothing left", st)
	}
	if ns := g.Gate().Stats(); ns.Started != 2 || ns.InFlight != 0 {
		t.Errorf("new gate %+v: want the 2 new requests", ns)
	}
	// Every lease is back: the key takes its 2 slots again.
	rule := portero.ConcurrencyRule{Name: "per-key", Max: 2}
	for i := range 2 {
		l, d, err := store.Acquire(context.Background(), time.Now(), rule, "header:X-Key=k")
		if err != nil || !d.Allowed {
			t.Fatalf("slot %d after everything ended: %+v, %v; want free", i, d, err)
		}
		defer l.Release(context.Background())
	}
}

// TestGatewayReloadKeepsWaiters: requests waiting for a concurrency slot
// keep their place across a reload that changes the rule and its queue:
// the slot an old request gives back goes to them, in order, and each is
// answered.
func TestGatewayReloadKeepsWaiters(t *testing.T) {
	up := newHeldUpstream(t)
	src := func(size int) string {
		return fmt.Sprintf(`
upstreams: {api: {url: %s}}
routes: [{upstream: api}]
rules:
  - name: one
    key: header:X-Key
    concurrency: {max: 1}
    queue: {size: %d, timeout: 1m}
`, up.URL, size)
	}
	g, srv, store := gw(t, src(2))
	running := async(srv.URL+"/", "X-Key", "k")
	<-up.entered
	var waiters []<-chan int
	for i := range 2 {
		waiters = append(waiters, async(srv.URL+"/", "X-Key", "k"))
		waitFor(t, "waiting for the slot", func() bool { return g.Limiter().Waiting() == i+1 })
	}
	cfg, err := config.Parse("reload.yaml", []byte(src(1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Update(cfg, store); err != nil {
		t.Fatal(err)
	}
	if n := g.Limiter().Waiting(); n != 2 {
		t.Errorf("%d waiting after the reload, want both", n)
	}
	// The new queue of 1 is full (two wait): a newcomer is refused at once.
	if code := <-async(srv.URL+"/", "X-Key", "k"); code != 429 {
		t.Errorf("a newcomer after the reload: %d, want 429", code)
	}
	// The running request ends; its slot goes to the first waiter, whose
	// end gives it to the second.
	for i := range 2 {
		up.release <- struct{}{}
		select {
		case <-up.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d did not get the slot given back", i)
		}
	}
	up.release <- struct{}{}
	for i, ch := range append([]<-chan int{running}, waiters...) {
		if code := <-ch; code != 200 {
			t.Errorf("request %d: %d, want 200", i, code)
		}
	}
}

// An unchanged overload section keeps its Gate (and the requests in it)
// across a reload.
func TestGatewayReloadKeepsGate(t *testing.T) {
	src := "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\noverload: {max_in_flight: 5, retry_after: 1s}\n"
	g, _, store := gw(t, src)
	before := g.Gate()
	cfg, err := config.Parse("same.yaml", []byte(src+"rules: [{name: r, key: ip, limit: 5/s}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Update(cfg, store); err != nil {
		t.Fatal(err)
	}
	if g.Gate() != before {
		t.Error("an unchanged overload section got a new Gate")
	}
	cfg, _ = config.Parse("off.yaml", []byte("upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n"))
	if err := g.Update(cfg, store); err != nil || g.Gate() != nil {
		t.Errorf("overload removed: %v, gate %v; want none", err, g.Gate())
	}
}

var _ = gateway.Hooks{}
