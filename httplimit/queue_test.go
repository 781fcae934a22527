package httplimit_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/overload"
)

// TestQueueDelays: a leaky-queue rule shapes. 8 requests at once against
// 2/s burst 5: the queue holds 5, which reach the handler one interval
// (0.5 s) apart, at 0.5, 1.0, … 2.5 s; the 3 that find it full are refused
// at once (as 9 arrivals at a queue of 6 places: 3 dropped), and none runs
// before its departure.
func TestQueueDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var ran []time.Duration
		h := shapeLimiter(t, "2/s burst 5", overload.Shape{}, func() {
			mu.Lock()
			ran = append(ran, time.Since(start))
			mu.Unlock()
		})
		var wg sync.WaitGroup
		codes := make([]int, 8)
		refusedAt := make([]time.Duration, 8)
		for i := range codes {
			wg.Go(func() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				codes[i] = rec.Code
				if rec.Code != 200 {
					refusedAt[i] = time.Since(start)
				}
			})
		}
		wg.Wait()
		slices.Sort(ran)
		want := []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond}
		if !slices.Equal(ran, want) {
			t.Errorf("handler ran at %v, want %v", ran, want)
		}
		refused := 0
		for i, c := range codes {
			if c == 429 {
				refused++
				if refusedAt[i] != 0 {
					t.Errorf("a refusal came after %v, want at once", refusedAt[i])
				}
			}
		}
		if refused != 3 {
			t.Errorf("codes %v: want 5 × 200 and 3 × 429", codes)
		}
	})
}

// TestQueueDeadline: a queued request whose wait would outlast its
// context's deadline is refused at once, with the rule's 429 (Retry-After,
// RateLimit fields, the problem naming the rule), not after waiting; one
// whose deadline leaves room waits and passes.
func TestQueueDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := shapeLimiter(t, "2/s burst 5", overload.Shape{}, func() {})
		send := func(budget time.Duration) (*httptest.ResponseRecorder, time.Duration) {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			start := time.Now()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			return rec, time.Since(start)
		}
		// Fill two places: the next request would wait 1.5 s.
		for range 2 {
			go send(time.Minute)
		}
		synctest.Wait()
		rec, took := send(time.Second)
		if rec.Code != 429 || took != 0 {
			t.Fatalf("1 s budget, 1.5 s wait: %d after %v, want 429 at once", rec.Code, took)
		}
		var p httplimit.Problem
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || !slices.Equal(p.ViolatedPolicies, []string{"queue"}) {
			t.Errorf("body %s: want a problem naming the queue rule", rec.Body)
		}
		for _, name := range []string{"Retry-After", "RateLimit", "RateLimit-Policy"} {
			if rec.Header().Get(name) == "" {
				t.Errorf("refusal without %s: %v", name, rec.Header())
			}
		}
		if ra := rec.Header().Get("Retry-After"); ra != "1" {
			// A 1.5 s hold (the refused request gave its place back) minus
			// a 1 s budget: 0.5 s, rounded up.
			t.Errorf("Retry-After = %s, want 1", ra)
		}
		time.Sleep(3 * time.Second) // the queue drains
		rec, took = send(2 * time.Second)
		if rec.Code != 200 || took != 500*time.Millisecond {
			t.Errorf("2 s budget, 0.5 s wait: %d after %v, want 200 after 500ms", rec.Code, took)
		}
	})
}

// TestQueueParallelHTTP sends 8 real requests at once through a loopback
// server against 20/s burst 5, every decision at one instant (a fixed
// clock, so that the machine's speed cannot change the count): 5 pass,
// each held at least k × 50 ms by its own place in the queue, and 3 are
// refused.
func TestQueueParallelHTTP(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h := shapeLimiter(t, "20/s burst 5", overload.Shape{}, func() {}, func() time.Time { return t0 })
	waits, refused := parallelGets(t, h, 8)
	if len(waits) != 5 || refused != 3 {
		t.Fatalf("%d passed, %d refused; want 5 and 3", len(waits), refused)
	}
	for k, w := range waits {
		if min := time.Duration(k+1) * 50 * time.Millisecond; w < min {
			t.Errorf("the %d-th request passed after %v, want at least %v", k+1, w, min)
		}
	}
}
