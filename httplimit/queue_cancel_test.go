package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

// giveUpLimiter is the middleware with a global queue of 2/s burst 5
// stacked with a global window of 10/min, over store, in front of next.
func giveUpLimiter(t *testing.T, store portero.Store, next http.Handler) http.Handler {
	t.Helper()
	p, err := policy.New([]policy.Rule{
		rule(t, "queue", "global", "2/s burst 5", func(r *policy.Rule) { r.Algorithm = portero.LeakyQueue }),
		rule(t, "window", "global", "10/min"),
	}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := httplimit.New(httplimit.Config{Policy: p, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return lim.Handler(next)
}

// TestQueueCancelGivesBack: five clients queue for a global 2/s queue and
// give up after 0.2 s. Each gives back what it counted — its place and
// its hit on the stacked window — so the next three requests are held as
// an empty queue holds them (0.5, 1.0 and 1.5 s) and the window has 7 of
// 10 left after them, not 429, 429 and a 2.5 s hold with 8 counted, as if
// the five places stayed taken until 2.5 s.
func TestQueueCancelGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		start := time.Now()
		var mu sync.Mutex
		var ran []time.Duration
		h := giveUpLimiter(t, store, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			mu.Lock()
			ran = append(ran, time.Since(start))
			mu.Unlock()
		}))
		var wg sync.WaitGroup
		for range 5 {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			wg.Go(func() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
				if rec.Code != http.StatusServiceUnavailable {
					t.Errorf("a client that gave up: %d, want 503", rec.Code)
				}
			})
			synctest.Wait()
		}
		wg.Wait()
		if since := time.Since(start); since != 200*time.Millisecond {
			t.Fatalf("the clients gave up after %v", since)
		}
		recs := make([]*httptest.ResponseRecorder, 3)
		for i := range recs {
			recs[i] = httptest.NewRecorder()
			wg.Go(func() { h.ServeHTTP(recs[i], httptest.NewRequest("GET", "/", nil)) })
			synctest.Wait()
		}
		wg.Wait()
		for i, rec := range recs {
			if rec.Code != 200 {
				t.Errorf("request %d after the clients gave up: %d, want 200", i+1, rec.Code)
			}
		}
		ms := time.Millisecond
		if want := []time.Duration{700 * ms, 1200 * ms, 1700 * ms}; !slices.Equal(ran, want) {
			t.Errorf("the handler ran at %v, want %v (holds of 0.5, 1.0, 1.5 s from 0.2 s)", ran, want)
		}
		if got := recs[2].Header().Get("RateLimit"); !strings.Contains(got, `"window";r=7`) {
			t.Errorf("RateLimit of the third request = %q, want the window at 7 left: the five that gave up count in no rule", got)
		}
	})
}

// TestQueueRefusalCountsNothing: a request refused because its hold would
// outlast its deadline counts in no rule. Two requests hold places 1 and 2
// of a global 2/s queue; a third with a 1 s budget would be held 1.5 s and
// is refused. It gives back its place and its hit on the stacked window:
// the next request is held 1.5 s, not 2.0 s, and leaves the window at 7 of
// 10 (the two, and itself), not 6.
func TestQueueRefusalCountsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		h := giveUpLimiter(t, store, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		var wg sync.WaitGroup
		defer wg.Wait()
		for range 2 {
			wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) })
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if rec.Code != 429 || !strings.Contains(rec.Header().Get("RateLimit"), `"queue";r=3`) {
			t.Errorf("1 s budget, 1.5 s hold: %d, RateLimit %q; want 429 with 3 places free (its own given back)", rec.Code, rec.Header().Get("RateLimit"))
		}
		start := time.Now()
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if took := time.Since(start); rec.Code != 200 || took != 1500*time.Millisecond {
			t.Errorf("the next request: %d after %v, want 200 after 1.5s", rec.Code, took)
		}
		if got := rec.Header().Get("RateLimit"); !strings.Contains(got, `"window";r=7`) {
			t.Errorf("RateLimit of the next request = %q, want the window at 7 left", got)
		}
	})
}

// TestQueueCancelGivesBackHTTP is the same over real HTTP on loopback,
// with the memory store and with a real redis-server: five clients with a
// 0.2 s timeout queue and give up; once the server has seen them go, the
// next three requests all pass (not 429 twice, as a queue full until 0.5 s
// would answer). Only statuses are asserted: a loaded machine
// lengthens every hold, and a late request finds a queue that drained.
func TestQueueCancelGivesBackHTTP(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		store, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		giveUpOverHTTP(t, store)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		store, err := redisstore.New(redisstore.Config{URL: srv.URL(), Prefix: "giveup:", Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		giveUpOverHTTP(t, store)
	})
}

func giveUpOverHTTP(t *testing.T, store portero.Store) {
	var calls atomic.Int64
	h := giveUpLimiter(t, store, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	finished := make(chan struct{}, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		finished <- struct{}{}
	}))
	defer srv.Close()
	impatient := &http.Client{Timeout: 200 * time.Millisecond}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if resp, err := impatient.Get(srv.URL); err == nil {
				resp.Body.Close()
				t.Errorf("a client with a 0.2 s timeout was answered %d: want it to give up while held", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	for range 5 {
		<-finished // the server has seen the client go, and given back
	}
	codes := make([]int, 3)
	for i := range codes {
		wg.Go(func() {
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	if !slices.Equal(codes, []int{200, 200, 200}) {
		t.Errorf("the three requests after the clients gave up: %v, want 200 each", codes)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the handler ran %d times, want 3 (never for a client that gave up)", n)
	}
}
