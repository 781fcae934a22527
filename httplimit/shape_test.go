package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
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

// shapeLimiter is the middleware with one leaky-queue rule per client,
// shaped by sh (none for the zero Shape: Config.Shapes then stays empty),
// in front of a handler that records when it ran.
func shapeLimiter(t *testing.T, limit string, sh overload.Shape, ran func(), now ...func() time.Time) http.Handler {
	t.Helper()
	store, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	p, err := policy.New([]policy.Rule{rule(t, "queue", "ip", limit, func(r *policy.Rule) { r.Algorithm = portero.LeakyQueue })}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := httplimit.Config{Policy: p, Store: store}
	if sh != (overload.Shape{}) {
		cfg.Shapes = map[string]overload.Shape{"queue": sh}
	}
	if len(now) > 0 {
		cfg.Now = now[0]
	}
	lim, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran() }))
}

// burst sends n requests at once through h and returns when the handler
// ran for each passed one (sorted), the status of each and how long after
// the start each refusal came.
func burst(t *testing.T, h http.Handler, n int, ran *[]time.Duration, mu *sync.Mutex) (codes []int, refusedAfter []time.Duration) {
	t.Helper()
	start := time.Now()
	codes = make([]int, n)
	after := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			codes[i] = rec.Code
			if rec.Code != 200 {
				after[i] = time.Since(start)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	slices.Sort(*ran)
	mu.Unlock()
	for i, c := range codes {
		if c != 200 {
			refusedAfter = append(refusedAfter, after[i])
		}
	}
	return codes, refusedAfter
}

// TestShapeDelay is nginx's limit_req burst with delay=N: 8 requests at
// once against 2/s burst 5 with Shape{Delay: 2}. The queue keeps 5; its
// first two places pass at once and the other three are spaced out at the
// rule's rate, at 0.5, 1.0 and 1.5 s (their departures, 1.5 to 2.5 s, less
// two intervals); the 3 that find the queue full are refused at once.
// Without the shape, the five ran at 0.5, 1.0, … 2.5 s (TestQueueDelays).
func TestShapeDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var ran []time.Duration
		h := shapeLimiter(t, "2/s burst 5", overload.Shape{Delay: 2}, func() {
			mu.Lock()
			ran = append(ran, time.Since(start))
			mu.Unlock()
		})
		codes, refusedAfter := burst(t, h, 8, &ran, &mu)
		ms := time.Millisecond
		if want := []time.Duration{0, 0, 500 * ms, 1000 * ms, 1500 * ms}; !slices.Equal(ran, want) {
			t.Errorf("handler ran at %v, want %v", ran, want)
		}
		if !slices.Equal(refusedAfter, []time.Duration{0, 0, 0}) || slices.Index(codes, 429) < 0 {
			t.Errorf("codes %v, refusals after %v: want 3 × 429 at once", codes, refusedAfter)
		}
	})
}

// TestShapeMaxDelay: a request whose hold would pass the shape's bound is
// refused at once with the rule's 429, not after waiting. 2/s burst 5,
// MaxDelay 1 s: of 5 queued places the holds are 0.5 … 2.5 s; the two
// within 1 s pass, the other three (and the three of a full queue) are
// refused at once, with Retry-After the wait after which the same request
// would be held within 1 s (a refused request gives its place back).
func TestShapeMaxDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var ran []time.Duration
		h := shapeLimiter(t, "2/s burst 5", overload.Shape{MaxDelay: time.Second}, func() {
			mu.Lock()
			ran = append(ran, time.Since(start))
			mu.Unlock()
		})
		_, refusedAfter := burst(t, h, 8, &ran, &mu)
		if want := []time.Duration{500 * time.Millisecond, time.Second}; !slices.Equal(ran, want) {
			t.Errorf("handler ran at %v, want %v", ran, want)
		}
		if !slices.Equal(refusedAfter, make([]time.Duration, 6)) {
			t.Errorf("refusals after %v, want 6 at once", refusedAfter)
		}
		time.Sleep(10 * time.Second) // everything drains
		// One place taken (hold 0.5 s), a second (1.0 s): the third would be
		// held 1.5 s: refused, Retry-After ⌈1.5 − 1⌉ = 1.
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) })
		}
		defer wg.Wait()
		synctest.Wait()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 429 || rec.Header().Get("Retry-After") != "1" || rec.Header().Get("RateLimit") == "" {
			t.Errorf("third request: %d, Retry-After %q, %v; want 429, Retry-After 1 and RateLimit fields", rec.Code, rec.Header().Get("Retry-After"), rec.Header())
		}
	})
}

// TestShapeDeadlineAndBound: the tighter of the context's deadline and the
// shape's MaxDelay bounds the hold.
func TestShapeDeadlineAndBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := shapeLimiter(t, "2/s burst 5", overload.Shape{Delay: 1, MaxDelay: 2 * time.Second}, func() {})
		send := func(budget time.Duration) (int, time.Duration) {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			start := time.Now()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			return rec.Code, time.Since(start)
		}
		// Place 1 passes at once; places 2 and 3 are held 0.5 and 1.0 s.
		if code, took := send(time.Minute); code != 200 || took != 0 {
			t.Fatalf("first: %d after %v, want 200 at once", code, took)
		}
		var wg sync.WaitGroup
		wg.Go(func() { send(time.Minute) })
		synctest.Wait()
		if code, took := send(700 * time.Millisecond); code != 429 || took != 0 {
			t.Errorf("0.7 s budget, 1 s hold: %d after %v, want 429 at once", code, took)
		}
		wg.Wait()
		time.Sleep(5 * time.Second)
		if code, took := send(time.Minute); code != 200 || took != 0 {
			t.Errorf("after draining: %d after %v, want 200 at once", code, took)
		}
	})
}

// TestShapeParallelHTTP sends 8 real requests at once through a loopback
// server against 20/s burst 5 with Shape{Delay: 3}, every decision at one
// instant (a fixed clock, so that the machine's speed cannot change the
// count): 5 pass — the 4th held at least 50 ms and the 5th at least 100 ms
// — and 3 are refused. Only lower bounds: a loaded machine adds to any
// wait.
func TestShapeParallelHTTP(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h := shapeLimiter(t, "20/s burst 5", overload.Shape{Delay: 3}, func() {}, func() time.Time { return t0 })
	waits, refused := parallelGets(t, h, 8)
	if len(waits) != 5 || refused != 3 {
		t.Fatalf("%d passed, %d refused; want 5 and 3", len(waits), refused)
	}
	if waits[3] < 50*time.Millisecond || waits[4] < 100*time.Millisecond {
		t.Errorf("waits %v: want the 4th ≥ 50ms and the 5th ≥ 100ms", waits)
	}
}

func TestShapeConfigErrors(t *testing.T) {
	store, _ := memstore.New(memstore.Config{SweepInterval: -1})
	defer store.Close(context.Background())
	p, err := policy.New([]policy.Rule{
		rule(t, "queue", "ip", "2/s", func(r *policy.Rule) { r.Algorithm = portero.LeakyQueue }),
		rule(t, "window", "ip", "2/s"),
	}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		shapes map[string]overload.Shape
		want   string
	}{
		{map[string]overload.Shape{"nope": {}}, `Shapes["nope"]: no such rule`},
		{map[string]overload.Shape{"window": {Delay: 1}}, `Shapes["window"]: the rule is fixed-window; only a leaky-queue rule shapes`},
		{map[string]overload.Shape{"queue": {Delay: -1}}, `Shapes["queue"]: shape: delay -1`},
	} {
		_, err := httplimit.New(httplimit.Config{Policy: p, Store: store, Shapes: tc.shapes})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with Shapes %v = %v, want an error containing %q", tc.shapes, err, tc.want)
		}
	}
	if _, err := httplimit.New(httplimit.Config{Policy: p, Store: store, Shapes: map[string]overload.Shape{"queue": {Delay: 3}}}); err != nil {
		t.Errorf("a valid shape: %v", err)
	}
}

// parallelGets sends n real requests at once to h on a loopback server and
// returns how long each admitted one took, shortest first, and how many
// were refused with 429; any other status fails the test.
func parallelGets(t *testing.T, h http.Handler, n int) (waits []time.Duration, refused int) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			start := time.Now()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			switch resp.StatusCode {
			case 200:
				waits = append(waits, time.Since(start))
			case 429:
				refused++
			default:
				t.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	slices.Sort(waits)
	return waits, refused
}
