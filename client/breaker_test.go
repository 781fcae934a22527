package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestBreakerTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		healthy := false
		f := &fakeRT{respond: func(int, *http.Request) (*http.Response, error) {
			if healthy {
				return resp(200), nil
			}
			return resp(500), nil
		}}
		var changes []string
		tr := newTransport(t, f, Config{Hooks: Hooks{OnBreaker: func(c BreakerChange) {
			changes = append(changes, c.From.String()+">"+c.To.String())
		}}})
		host := "http://api.test"

		// Five consecutive failures (default) open the breaker.
		for i := range 5 {
			if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 500 {
				t.Fatalf("request %d: %v, %v, want 500", i+1, res, err)
			}
		}
		if s := tr.BreakerState(host); s != BreakerOpen {
			t.Fatalf("after 5 failures the breaker is %v, want open", s)
		}
		// While open: a clear error, and the host is not called.
		_, err := get(t, tr, "GET", testURL, nil)
		if !errors.Is(err, ErrCircuitOpen) || !strings.Contains(err.Error(), host) {
			t.Errorf("open breaker: err = %v, want ErrCircuitOpen naming %s", err, host)
		}
		if n := len(f.Calls()); n != 5 {
			t.Errorf("calls = %d, want 5: an open breaker must not call the host", n)
		}

		// Still open until the full cool-down has passed.
		time.Sleep(30 * time.Second)
		if _, err := get(t, tr, "GET", testURL, nil); !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("at 30 s: err = %v, want ErrCircuitOpen", err)
		}
		// After the cool-down one trial goes; it fails, so open again.
		time.Sleep(time.Millisecond)
		if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 500 {
			t.Errorf("trial: %v, %v, want the host's 500", res, err)
		}
		if s := tr.BreakerState(host); s != BreakerOpen {
			t.Errorf("after a failed trial the breaker is %v, want open", s)
		}
		// Next cool-down, a successful trial closes it.
		time.Sleep(30*time.Second + time.Millisecond)
		healthy = true
		if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 200 {
			t.Errorf("second trial: %v, %v, want 200", res, err)
		}
		if s := tr.BreakerState(host); s != BreakerClosed {
			t.Errorf("after a good trial the breaker is %v, want closed", s)
		}
		want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
		if strings.Join(changes, " ") != strings.Join(want, " ") {
			t.Errorf("breaker changes = %v, want %v", changes, want)
		}
	})
}

func TestBreakerHalfOpenLetsOneTrial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		trial := false
		f := &fakeRT{respond: func(int, *http.Request) (*http.Response, error) {
			mu.Lock()
			tr := trial
			mu.Unlock()
			if tr {
				<-release // the trial hangs until released
				return resp(200), nil
			}
			return resp(503), nil
		}}
		tr := newTransport(t, f, Config{MaxAttempts: 1, Breaker: BreakerConfig{Failures: 2, CoolDown: 10 * time.Second}})
		get(t, tr, "GET", testURL, nil)
		get(t, tr, "GET", testURL, nil)
		time.Sleep(10*time.Second + time.Millisecond)
		mu.Lock()
		trial = true
		mu.Unlock()
		done := make(chan *http.Response)
		go func() {
			res, _ := get(t, tr, "GET", testURL, nil)
			done <- res
		}()
		synctest.Wait() // the trial is in flight
		if _, err := get(t, tr, "GET", testURL, nil); !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("second request during the trial: err = %v, want ErrCircuitOpen", err)
		}
		close(release)
		if res := <-done; res == nil || res.StatusCode != 200 {
			t.Errorf("trial = %v, want 200", res)
		}
		if n := len(f.Calls()); n != 3 {
			t.Errorf("calls = %d, want 3 (2 failures + 1 trial)", n)
		}
	})
}

func TestBreakerFallbackAndCustomFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(418))}
		var fbErr error
		tr := newTransport(t, f, Config{Breaker: BreakerConfig{
			Failures:  3,
			IsFailure: func(res *http.Response, err error) bool { return err != nil || res.StatusCode == 418 },
			Fallback: func(req *http.Request, err error) (*http.Response, error) {
				fbErr = err
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("cached")), Request: req}, nil
			},
		}})
		for range 3 {
			get(t, tr, "GET", testURL, nil)
		}
		req, _ := http.NewRequest("GET", testURL, nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		if string(b) != "cached" || !errors.Is(fbErr, ErrCircuitOpen) {
			t.Errorf("fallback answered %q with err %v, want %q and ErrCircuitOpen", b, fbErr, "cached")
		}
		if n := len(f.Calls()); n != 3 {
			t.Errorf("calls = %d, want 3", n)
		}
	})
}

func TestBreakerIgnores429AndStopsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 429s, however many, do not open the breaker.
		f := &fakeRT{respond: script(r(429, "Retry-After", "0"))}
		tr := newTransport(t, f, Config{MaxAttempts: 20, DisablePacing: true})
		get(t, tr, "GET", testURL, nil)
		if n, s := len(f.Calls()), tr.BreakerState("http://api.test"); n != 20 || s != BreakerClosed {
			t.Errorf("20 × 429: %d calls, breaker %v, want 20 and closed", n, s)
		}
		// Other calls' failures open it while a request waits between its
		// retries: that request then stops, unsent, with ErrCircuitOpen.
		f = &fakeRT{respond: script(r(503, "Retry-After", "5"))}
		var gu []GiveUp
		tr = newTransport(t, f, Config{MaxAttempts: 10, DisablePacing: true, Breaker: BreakerConfig{Failures: 2}, Hooks: Hooks{OnGiveUp: func(g GiveUp) { gu = append(gu, g) }}})
		done := make(chan error)
		go func() {
			_, err := get(t, tr, "GET", testURL, nil)
			done <- err
		}()
		time.Sleep(time.Second)
		for range 2 { // POSTs: one attempt each
			if res, err := get(t, tr, "POST", testURL, nil); err != nil || res.StatusCode != 503 {
				t.Errorf("POST: %v, %v, want the 503", res, err)
			}
		}
		if s := tr.BreakerState("http://api.test"); s != BreakerOpen {
			t.Errorf("after 2 failed calls the breaker is %v, want open", s)
		}
		if err := <-done; !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("the waiting request: err = %v, want ErrCircuitOpen once its wait ended", err)
		}
		if n := len(f.Calls()); n != 3 {
			t.Errorf("calls = %d, want 3: the waiting request sends no retry to an open breaker", n)
		}
		if len(gu) != 3 || gu[2].Reason != GiveUpBreakerOpen || gu[2].Attempts != 1 || gu[2].Request.Method != "GET" {
			t.Errorf("OnGiveUp = %+v, want two not-idempotent POSTs, then the GET's breaker-open after 1 attempt", gu)
		}
	})
}

// TestBreakerCountsCalls: the breaker counts a call
// once, by its last attempt ("5 consecutive failed calls"), so one GET that
// is retried five times against a 503 does not open it by itself.
func TestBreakerCountsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		healthy := map[int]bool{} // attempt numbers answered 200
		f := &fakeRT{}
		f.respond = func(n int, _ *http.Request) (*http.Response, error) {
			mu.Lock()
			defer mu.Unlock()
			if healthy[n] {
				return resp(200), nil
			}
			return resp(503, "Retry-After", "1"), nil
		}
		tr := newTransport(t, f, Config{DisablePacing: true}) // 5 attempts, 5 failed calls open it
		host := "http://api.test"
		call := func(i int) {
			t.Helper()
			if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 503 {
				t.Fatalf("call %d: %v, %v, want the last 503", i, res, err)
			}
		}
		call(1)
		if n, s := len(f.Calls()), tr.BreakerState(host); n != 5 || s != BreakerClosed {
			t.Fatalf("one call of 5 failed attempts: %d attempts, breaker %v; want 5 and closed", n, s)
		}
		for i := 2; i <= 4; i++ {
			call(i)
		}
		if s := tr.BreakerState(host); s != BreakerClosed {
			t.Fatalf("after 4 failed calls the breaker is %v, want closed", s)
		}
		// A call whose retry succeeds is a good call: the count starts over.
		mu.Lock()
		healthy[22] = true // the second attempt of the fifth call
		mu.Unlock()
		if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 200 {
			t.Fatalf("call 5: %v, %v, want 200 on its retry", res, err)
		}
		for i := 6; i <= 9; i++ {
			call(i)
		}
		if s := tr.BreakerState(host); s != BreakerClosed {
			t.Fatalf("4 failed calls after a good one: breaker %v, want closed", s)
		}
		call(10)
		if s := tr.BreakerState(host); s != BreakerOpen {
			t.Fatalf("after 5 consecutive failed calls the breaker is %v, want open", s)
		}
		if n := len(f.Calls()); n != 47 {
			t.Errorf("attempts = %d, want 47 (9 calls of 5, one of 2)", n)
		}
	})
}

// TestBreakerBeforePacer: an open breaker answers at
// once, without waiting behind the pacer (here a 20 s Retry-After hold) and
// without the pacer's ErrBudgetExceeded on a short deadline.
func TestBreakerBeforePacer(t *testing.T) {
	for _, fallback := range []bool{true, false} {
		t.Run(map[bool]string{true: "fallback", false: "no-fallback"}[fallback], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeRT{respond: script(r(503, "Retry-After", "20"))}
				cfg := Config{MaxAttempts: 1, Breaker: BreakerConfig{Failures: 1}}
				if fallback {
					cfg.Breaker.Fallback = func(req *http.Request, err error) (*http.Response, error) {
						return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("cached")), Request: req}, nil
					}
				}
				tr := newTransport(t, f, cfg)
				get(t, tr, "GET", testURL, nil) // 503: the breaker opens, the host is held 20 s
				check := func(what string, res *http.Response, err error) {
					t.Helper()
					if fallback && (err != nil || res == nil || res.StatusCode != 200) {
						t.Errorf("fallback, %s: %v, %v, want the fallback's 200", what, res, err)
					}
					if !fallback && !errors.Is(err, ErrCircuitOpen) {
						t.Errorf("no fallback, %s: %v, %v, want ErrCircuitOpen", what, res, err)
					}
				}
				// A 1 s deadline inside the 20 s hold: not ErrBudgetExceeded.
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", testURL, nil)
				res, err := tr.RoundTrip(req)
				check("1 s deadline", res, err)
				if errors.Is(err, ErrBudgetExceeded) {
					t.Errorf("fallback=%v: err = %v: the pacer was asked before the open breaker", fallback, err)
				}
				// No deadline: at once, not after the hold.
				start := time.Now()
				res, err = get(t, tr, "GET", testURL, nil)
				check("no deadline", res, err)
				if el := time.Since(start); el != 0 {
					t.Errorf("fallback=%v: the open breaker answered after %v, want at once (not behind the 20 s hold)", fallback, el)
				}
				if n := len(f.Calls()); n != 1 {
					t.Errorf("calls = %d, want 1", n)
				}
			})
		})
	}
}

func TestBreakerDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(500))}
		tr := newTransport(t, f, Config{Breaker: BreakerConfig{Disabled: true}})
		for range 10 {
			get(t, tr, "GET", testURL, nil)
		}
		if n := len(f.Calls()); n != 10 {
			t.Errorf("calls = %d, want 10 with the breaker disabled", n)
		}
	})
}
