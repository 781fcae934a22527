package httplimit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

func gate(t *testing.T, cfg overload.Config) *overload.Gate {
	t.Helper()
	g, err := overload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func shed(t *testing.T, cfg httplimit.ShedConfig) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httplimit.Shed(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// checkShed503 checks a shedding answer: 503, Retry-After, the
// temporary-reduced-capacity problem.
func checkShed503(t *testing.T, status int, h http.Header, body []byte, retryAfter string) {
	t.Helper()
	var p httplimit.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if status != http.StatusServiceUnavailable || h.Get("Retry-After") != retryAfter ||
		h.Get("Content-Type") != "application/problem+json" || h.Get("Cache-Control") != "no-store" ||
		p.Type != httplimit.ProblemTemporaryReducedCapacity || p.Status != 503 || p.Detail == "" {
		t.Errorf("got %d, Retry-After %q, %v, %+v; want 503, Retry-After %s, a temporary-reduced-capacity problem", status, h.Get("Retry-After"), h, p, retryAfter)
	}
}

// TestShedRealServer: on a real loopback server, with one slot and no
// queue, a second request while the first runs is answered 503 at once and
// never reaches the handler; once the first ends, the slot is free again.
func TestShedRealServer(t *testing.T) {
	g := gate(t, overload.Config{MaxInFlight: 1, RetryAfter: 3 * time.Second})
	var calls atomic.Int64
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	})
	srv := httptest.NewServer(shed(t, httplimit.ShedConfig{Gate: g})(app))
	defer srv.Close()

	first := make(chan int, 1)
	go func() {
		resp, err := http.Get(srv.URL)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-entered
	resp, err := http.Post(srv.URL+"/upload", "text/plain", strings.NewReader(strings.Repeat("x", 1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	checkShed503(t, resp.StatusCode, resp.Header, body, "3")
	close(release)
	if code := <-first; code != 200 {
		t.Errorf("first request: %d, want 200", code)
	}
	resp, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || calls.Load() != 2 {
		t.Errorf("after the first ended: %d with %d handler calls, want 200 and 2", resp.StatusCode, calls.Load())
	}
}

// readSpy records whether anyone read the body.
type readSpy struct{ read atomic.Bool }

func (s *readSpy) Read(p []byte) (int, error) { s.read.Store(true); return 0, io.EOF }

// TestShedBeforeBodyAndAuth: a shed request's body is never read and the
// middleware after Shed (authentication, say) never runs.
func TestShedBeforeBodyAndAuth(t *testing.T) {
	g := gate(t, overload.Config{MaxInFlight: 1})
	running, _ := g.Acquire(t.Context(), overload.Request{}) // the service is full
	var authRan atomic.Bool
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { authRan.Store(true); next.ServeHTTP(w, r) })
	}
	h := shed(t, httplimit.ShedConfig{Gate: g})(auth(http.NotFoundHandler()))
	spy := &readSpy{}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/orders", spy))
	checkShed503(t, rec.Code, rec.Header(), rec.Body.Bytes(), "1")
	if spy.read.Load() || authRan.Load() {
		t.Errorf("body read %v, authentication ran %v; want neither", spy.read.Load(), authRan.Load())
	}
	g.Release(running)
}

// TestShedReleasesOnPanic: a handler that panics gives its slot back.
func TestShedReleasesOnPanic(t *testing.T) {
	g := gate(t, overload.Config{MaxInFlight: 1})
	h := shed(t, httplimit.ShedConfig{Gate: g})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	func() {
		defer func() { recover() }()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	if s := g.Stats(); s.InFlight != 0 || s.Finished != 1 {
		t.Errorf("after a panic: %+v, want nothing in flight", s)
	}
}

// TestShedPriorities: four slots, one kept for critical work and one more
// that sheddable work may not take; the class comes from rules on the
// path. With two ordinary requests running, a prefetch (sheddable) is shed,
// an ordinary request takes the third slot, and checkout (critical) the
// last.
func TestShedPriorities(t *testing.T) {
	prio, err := httplimit.PriorityByRule([]httplimit.PriorityRule{
		{Match: policy.Match{Methods: []string{"POST"}, Path: "/checkout"}, Priority: overload.Critical},
		{Match: policy.Match{Path: "/prefetch/**"}, Priority: overload.Sheddable},
		{Match: policy.Match{Headers: map[string]string{"X-Batch": "*"}}, Priority: overload.Sheddable},
	}, overload.Default)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path, header string
		want                 overload.Priority
	}{
		{"POST", "/checkout", "", overload.Critical},
		{"GET", "/checkout", "", overload.Default},
		{"GET", "/prefetch/a/b", "", overload.Sheddable},
		{"GET", "/home", "X-Batch", overload.Sheddable},
		{"GET", "/home", "", overload.Default},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.header != "" {
			r.Header.Set(tc.header, "1")
		}
		if got := prio(r); got != tc.want {
			t.Errorf("priority(%s %s %s) = %v, want %v", tc.method, tc.path, tc.header, got, tc.want)
		}
	}

	synctest.Test(t, func(t *testing.T) {
		g := gate(t, overload.Config{MaxInFlight: 4, Reserve: overload.Reserve{Critical: 1, Default: 1}})
		hold := make(chan struct{})
		h := shed(t, httplimit.ShedConfig{Gate: g, Priority: prio})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hold }))
		var wg sync.WaitGroup
		serve := func(method, path string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			wg.Go(func() { h.ServeHTTP(rec, httptest.NewRequest(method, path, nil)) })
			synctest.Wait()
			return rec
		}
		serve("GET", "/a")
		serve("GET", "/b")
		pre := serve("GET", "/prefetch/x")
		serve("GET", "/c")
		late := serve("GET", "/d")
		checkout := serve("POST", "/checkout")
		if s := g.Stats(); s.InFlight != 4 || s.Refused[overload.Full] != 2 {
			t.Errorf("Stats = %+v, want 4 in flight and 2 refused", s)
		}
		checkShed503(t, pre.Code, pre.Header(), pre.Body.Bytes(), "1")
		checkShed503(t, late.Code, late.Header(), late.Body.Bytes(), "1")
		close(hold)
		wg.Wait()
		if checkout.Code != 200 {
			t.Errorf("checkout: %d, want 200", checkout.Code)
		}
	})
}

// TestShedQueueTimeout: with Timeout 300 ms and a run time of 100 ms, a
// queued request is answered 503 when it can no longer be answered in time,
// 200 ms after it came, not after its client's full 300 ms.
func TestShedQueueTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := gate(t, overload.Config{MaxInFlight: 1, QueueSize: 10, ServiceTime: 100 * time.Millisecond})
		var refused []*overload.Refusal
		hold := make(chan struct{})
		h := shed(t, httplimit.ShedConfig{Gate: g, Timeout: 300 * time.Millisecond,
			OnRefuse: func(_ *http.Request, ref *overload.Refusal) { refused = append(refused, ref) }})(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hold }))
		go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		synctest.Wait()
		start := time.Now()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if took := time.Since(start); took != 200*time.Millisecond {
			t.Errorf("the queued request was answered after %v, want 200ms", took)
		}
		checkShed503(t, rec.Code, rec.Header(), rec.Body.Bytes(), "1")
		if len(refused) != 1 || refused[0].Reason != overload.Late {
			t.Errorf("OnRefuse saw %v, want one Late refusal", refused)
		}
		close(hold)
	})
}

func TestShedConfigErrors(t *testing.T) {
	if _, err := httplimit.Shed(httplimit.ShedConfig{}); err == nil {
		t.Error("Shed without a Gate succeeded")
	}
	if _, err := httplimit.Shed(httplimit.ShedConfig{Gate: gate(t, overload.Config{MaxInFlight: 1}), Timeout: -1}); err == nil {
		t.Error("Shed with a negative Timeout succeeded")
	}
	_, err := httplimit.PriorityByRule([]httplimit.PriorityRule{{Match: policy.Match{Path: "/a/**/b/**"}, Priority: overload.Critical}}, overload.Default)
	if err == nil || !strings.Contains(err.Error(), "priority rule 0 (critical)") {
		t.Errorf("PriorityByRule with a bad path = %v, want an error naming rule 0", err)
	}
}
