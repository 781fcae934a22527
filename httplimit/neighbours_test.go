package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

func concRule(name, key string, max int64) policy.Rule {
	return policy.Rule{Name: name, Key: policy.MustParseKey(key), Concurrency: portero.ConcurrencyRule{Max: max}}
}

func limiter(t *testing.T, cfg httplimit.Config, rules ...policy.Rule) *httplimit.Limiter {
	t.Helper()
	p, err := policy.New(rules, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy = p
	if cfg.Store == nil {
		st, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		cfg.Store = st
	}
	l, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// One Limiter with a rate rule and a concurrency rule: the fields of both
// come from the one writer in the same response — both members in
// RateLimit-Policy and both items in RateLimit when admitted (the
// concurrency item without t) — and a concurrency refusal (429, the
// client's own limit) counts nothing under the rate rule.
func TestRateAndConcurrencyFields(t *testing.T) {
	l := limiter(t, httplimit.Config{Now: newClock().Now}, rule(t, "per-ip", "ip", "10/min"), concRule("one-at-a-time", "ip", 1))
	g := newHoldGate()
	srv := httptest.NewServer(l.Handler(g))
	defer srv.Close()
	type result struct {
		resp *http.Response
		err  error
	}
	first := make(chan result, 1)
	go func() {
		resp, err := http.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		first <- result{resp, err}
	}()
	<-g.entered

	resp, body := do(t, "GET", srv.URL, nil, "")
	var p httplimit.Problem
	if err := json.Unmarshal(body, &p); err != nil || resp.StatusCode != 429 || p.Type != httplimit.ProblemQuotaExceeded || fmt.Sprint(p.ViolatedPolicies) != "[one-at-a-time]" {
		t.Errorf("second while the first runs: %d %s; want 429 quota-exceeded by one-at-a-time", resp.StatusCode, body)
	}
	if !strings.Contains(p.Detail, `"one-at-a-time" allows 1 concurrent requests for this client`) || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("429 detail %q, Retry-After %q", p.Detail, resp.Header.Get("Retry-After"))
	}
	if pol := checkSF(t, resp.Header, "RateLimit-Policy"); len(pol) != 2 || fmt.Sprint(pol["one-at-a-time"]["qu"]) != "concurrent-requests" {
		t.Errorf("429 RateLimit-Policy = %q, want both rules", resp.Header.Values("RateLimit-Policy"))
	}
	if rl := checkSF(t, resp.Header, "RateLimit"); len(rl) != 1 || fmt.Sprint(rl["one-at-a-time"]) != "map[r:0]" {
		t.Errorf("429 RateLimit = %q, want only the concurrency rule's item, r=0 and no t", resp.Header.Values("RateLimit"))
	}

	close(g.release)
	fr := <-first
	if fr.err != nil {
		t.Fatal(fr.err)
	}
	if got := fr.resp.Header.Values("RateLimit"); fmt.Sprint(got) != `["per-ip";r=9;t=60, "one-at-a-time";r=0]` {
		t.Errorf("admitted RateLimit = %q, want both items", got)
	}
	if got := fr.resp.Header.Values("RateLimit-Policy"); fmt.Sprint(got) != `["per-ip";q=10;w=60, "one-at-a-time";q=1;qu="concurrent-requests"]` {
		t.Errorf("admitted RateLimit-Policy = %q, want both members", got)
	}
	// The refused request was not counted by the rate rule: the third is
	// the second counted.
	g2 := newHoldGate()
	close(g2.release)
	srv2 := httptest.NewServer(l.Handler(g2))
	defer srv2.Close()
	resp, _ = do(t, "GET", srv2.URL, nil, "")
	if rl := checkSF(t, resp.Header, "RateLimit"); fmt.Sprint(rl["per-ip"]["r"]) != "8" || fmt.Sprint(rl["one-at-a-time"]["r"]) != "0" {
		t.Errorf("third: RateLimit %q, want per-ip r=8 (the refusal uncounted)", resp.Header.Values("RateLimit"))
	}
}

// Two limiters stacked, a concurrency middleware around a rate limiter (or
// the other way round): each adds its members to RateLimit and
// RateLimit-Policy, neither replaces the other's.
func TestStackedLimitersKeepBothFields(t *testing.T) {
	for _, outerConc := range []bool{true, false} {
		store := leaseStore(t)
		c := concurrency(t, httplimit.ConcurrencyConfig{Rules: []httplimit.ConcurrencyRule{{Name: "in-flight", Key: policy.MustParseKey("global"), Max: 4}}, Store: store})
		rate := limiter(t, httplimit.Config{Store: store}, rule(t, "per-ip", "ip", "10/min"))
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
		h := c.Handler(rate.Handler(ok))
		if !outerConc {
			h = rate.Handler(c.Handler(ok))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		rl := checkSF(t, rec.Header(), "RateLimit")
		pol := checkSF(t, rec.Header(), "RateLimit-Policy")
		if len(rl) != 2 || len(pol) != 2 || rl["in-flight"] == nil || rl["per-ip"] == nil {
			t.Errorf("concurrency outside: %v: RateLimit %q, RateLimit-Policy %q; want both limiters' members", outerConc, rec.Header().Values("RateLimit"), rec.Header().Values("RateLimit-Policy"))
		}
	}
}

// A service-wide concurrency rule answers 503 temporary-reduced-capacity
// naming the rule; the lease failure policy is the Limiter's one
// OnStoreError: deny answers 503 "cannot reach its store", allow lets the
// request through.
func TestConcurrencyServiceAndFailure(t *testing.T) {
	l := limiter(t, httplimit.Config{}, concRule("service", "global", 1))
	g := newHoldGate()
	srv := httptest.NewServer(l.Handler(g))
	defer srv.Close()
	first := goGet(srv.URL, nil)
	<-g.entered
	resp, body := do(t, "GET", srv.URL, nil, "")
	var p httplimit.Problem
	if err := json.Unmarshal(body, &p); err != nil || resp.StatusCode != 503 || p.Type != httplimit.ProblemTemporaryReducedCapacity ||
		fmt.Sprint(p.ViolatedPolicies) != "[service]" || !strings.Contains(p.Detail, `"service" allows 1 requests in flight`) || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("service full: %d %s Retry-After %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	close(g.release)
	<-first

	for _, tc := range []struct {
		pol  portero.FailurePolicy
		want int
	}{{portero.FailDeny, 503}, {portero.FailAllow, 200}} {
		var errs []error
		var mu sync.Mutex
		l := limiter(t, httplimit.Config{Store: &failingStore{}, Leases: failingLeases{}, OnStoreError: tc.pol,
			OnError: func(_ *http.Request, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }},
			concRule("per-ip", "ip", 5))
		rec := httptest.NewRecorder()
		l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != tc.want || len(errs) != 1 {
			t.Errorf("%s with the lease store down: %d, %d errors reported; want %d and 1", tc.pol, rec.Code, len(errs), tc.want)
		}
		if tc.pol == portero.FailDeny && !strings.Contains(rec.Body.String(), "cannot reach its store") {
			t.Errorf("deny: %s", rec.Body)
		}
	}
}

// failingStore is a rate store that is down.
type failingStore struct{ failingLeases }

func (*failingStore) AllowAll(context.Context, time.Time, []portero.Hit) ([]portero.Decision, error) {
	return nil, portero.ErrStoreUnavailable
}
func (*failingStore) Peek(context.Context, portero.Rule, string, time.Time, int64) (portero.Decision, error) {
	return portero.Decision{}, portero.ErrStoreUnavailable
}
func (*failingStore) Close(context.Context) error { return nil }

// served is what one request through a handler got, and when.
type served struct {
	name  string
	code  int
	after time.Duration
}

// TestConcurrencyQueue: a concurrency rule with a queue lets refused
// requests wait for a slot of their key, in virtual time: one slot held
// for 1.05 s (not a multiple of the waiters' 100 ms tries, so that the
// slot given back wakes a waiter rather than racing a try), three more
// requests; under FIFO (wine) the queue of 2 refuses
// the third newcomer at once and serves the waiters oldest first, under
// LIFO (milk) it pushes out its oldest waiter for the newcomer and serves
// the newest first; a waiter still waiting at the queue's timeout is
// refused then, with the rule's 429.
func TestConcurrencyQueue(t *testing.T) {
	const run = 1050 * time.Millisecond
	for _, tc := range []struct {
		order overload.Order
		want  []served // in order of answer
	}{
		{overload.FIFO, []served{
			{"d", 429, 0},                       // the queue of 2 is full: refused at once
			{"a", 200, run},                     // the slot's holder
			{"c", 429, 1500 * time.Millisecond}, // its 1.5 s timeout came while b ran
			{"b", 200, 2 * run},                 // the oldest waiter, served when a ended
		}},
		{overload.LIFO, []served{
			{"b", 429, 0},                       // the oldest waiter, pushed out by d
			{"a", 200, run},                     // the slot's holder
			{"c", 429, 1500 * time.Millisecond}, // timed out while d ran
			{"d", 200, 2 * run},                 // the newest waiter, served first
		}},
	} {
		t.Run(tc.order.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := limiter(t, httplimit.Config{Queues: map[string]overload.Queue{"one": {Size: 2, Timeout: 1500 * time.Millisecond, Order: tc.order}}},
					concRule("one", "ip", 1))
				h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(run) }))
				start := time.Now()
				var mu sync.Mutex
				var got []served
				var wg sync.WaitGroup
				for _, name := range []string{"a", "b", "c", "d"} {
					wg.Go(func() {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
						mu.Lock()
						got = append(got, served{name, rec.Code, time.Since(start)})
						mu.Unlock()
					})
					synctest.Wait() // each arrives after the one before has settled
				}
				wg.Wait()
				sort.SliceStable(got, func(i, j int) bool { return got[i].after < got[j].after })
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("answers %v, want %v", got, tc.want)
				}
			})
		})
	}
}

// A waiter leaves at its context's deadline when that comes before the
// queue's timeout, refused with the rule's 429; one whose client goes away
// gets a 503 nobody reads, and takes no slot.
func TestConcurrencyQueueDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limiter(t, httplimit.Config{Queues: map[string]overload.Queue{"one": {Size: 4, Timeout: time.Minute}}}, concRule("one", "ip", 1))
		release := make(chan struct{})
		h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		synctest.Wait()

		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if rec.Code != 429 || time.Since(start) != 300*time.Millisecond {
			t.Errorf("with a 300 ms deadline: %d after %v, want 429 after 300 ms", rec.Code, time.Since(start))
		}

		gone, leave := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(gone))
			done <- rec.Code
		}()
		synctest.Wait()
		leave()
		if code := <-done; code != 503 {
			t.Errorf("a waiter whose client left: %d, want 503", code)
		}
		close(release)
	})
}

// TestConcurrencyQueuePolls: a slot given back by another instance (here,
// straight to the store: no signal reaches this process) is found by the
// waiter's next try, every 100 ms: released at 250 ms, taken at 300 ms.
func TestConcurrencyQueuePolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := memstore.New(memstore.Config{SweepInterval: -1, Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close(context.Background())
		l := limiter(t, httplimit.Config{Store: st, Queues: map[string]overload.Queue{"one": {Size: 1, Timeout: time.Minute}}}, concRule("one", "ip", 1))
		other, d, err := st.Acquire(context.Background(), time.Now(), portero.ConcurrencyRule{Name: "one", Max: 1}, "ip=192.0.2.1/32")
		if err != nil || !d.Allowed {
			t.Fatalf("another instance's lease: %+v, %v", d, err)
		}
		start := time.Now()
		var ran time.Duration
		done := make(chan int)
		go func() {
			rec := httptest.NewRecorder()
			l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = time.Since(start) })).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			done <- rec.Code
		}()
		time.Sleep(250 * time.Millisecond)
		other.Release(context.Background())
		if code := <-done; code != 200 || ran != 300*time.Millisecond {
			t.Errorf("the waiter: %d, ran at %v; want 200 at 300 ms (the try after the release)", code, ran)
		}
	})
}
