package client

import (
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
		// 503s open it in the middle of a request's retries, which then
		// stop and return the last 503.
		f = &fakeRT{respond: script(r(503, "Retry-After", "1"))}
		var gu []GiveUp
		tr = newTransport(t, f, Config{MaxAttempts: 10, Breaker: BreakerConfig{Failures: 3}, Hooks: Hooks{OnGiveUp: func(g GiveUp) { gu = append(gu, g) }}})
		res, err := get(t, tr, "GET", testURL, nil)
		if err != nil || res.StatusCode != 503 || len(f.Calls()) != 3 {
			t.Errorf("503s: %v, %v after %d calls, want the 503 after 3", res, err, len(f.Calls()))
		}
		if len(gu) != 1 || gu[0].Reason != GiveUpBreakerOpen {
			t.Errorf("OnGiveUp = %+v, want breaker-open", gu)
		}
	})
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
