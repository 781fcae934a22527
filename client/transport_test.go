package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dunglas/httpsfv"
)

const testURL = "http://api.test/v1/things"

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{
		{MaxAttempts: -1},
		{Base: -time.Second},
		{Cap: -time.Second},
		{Base: 2 * time.Second, Cap: time.Second},
		{MaxRetryAfter: -1},
		{MaxHold: -1},
		{MaxHold: time.Minute, MaxRetryAfter: time.Hour},
		{MaxHold: 10 * time.Second}, // below the default MaxRetryAfter of 30 s
		{Breaker: BreakerConfig{Failures: -1}},
		{Breaker: BreakerConfig{CoolDown: -1}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", cfg)
		}
	}
	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := tr.cfg
	if c.MaxAttempts != 5 || c.Base != 500*time.Millisecond || c.Cap != 10*time.Second || c.MaxElapsed != time.Minute ||
		c.MaxRetryAfter != 30*time.Second || c.MaxHold != 24*time.Hour || c.Breaker.Failures != 5 || c.Breaker.CoolDown != 30*time.Second || tr.next != http.DefaultTransport {
		t.Errorf("New(Config{}) defaults = %+v", c)
	}
}

func TestRetryAfterDelaySeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(429, "Retry-After", "3"), r(200))}
		var waits []Wait
		tr := newTransport(t, f, Config{Rand: rand.NewPCG(5, 6), Hooks: Hooks{OnWait: func(w Wait) { waits = append(waits, w) }}})
		res, err := get(t, tr, "GET", testURL, nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("RoundTrip = %v, %v, want 200", res, err)
		}
		// 3 s, then the default jitter of up to 1 s, drawn from the source.
		jitter := FullJitter(time.Second, rand.New(rand.NewPCG(5, 6)).Float64())
		if g := gaps(f.Calls()); len(g) != 1 || g[0] != 3*time.Second+jitter || jitter <= 0 {
			t.Errorf("gaps between attempts = %v, want [3s + %v]", g, jitter)
		}
		if len(waits) != 1 || waits[0].Reason != WaitRetryAfter || waits[0].Retry != 1 || waits[0].Status != 429 || waits[0].Duration != 3*time.Second+jitter || waits[0].Jitter != jitter {
			t.Errorf("OnWait got %+v, want one retry-after wait of 3s + %v before retry 1", waits, jitter)
		}
		// Without jitter, exactly what the server said.
		f = &fakeRT{respond: script(r(429, "Retry-After", "3"), r(200))}
		get(t, newTransport(t, f, Config{RetryAfterJitter: -1}), "GET", testURL, nil)
		if g := gaps(f.Calls()); len(g) != 1 || g[0] != 3*time.Second {
			t.Errorf("RetryAfterJitter -1: gaps = %v, want [3s]", g)
		}
	})
}

func TestRetryAfterHTTPDateForms(t *testing.T) {
	// The server's clock is 1 h ahead; the wait is measured against its
	// Date field, in each of the three HTTP-date formats.
	for name, layout := range map[string]string{"IMF-fixdate": http.TimeFormat, "RFC 850": "Monday, 02-Jan-06 15:04:05 GMT", "asctime": time.ANSIC} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				server := time.Now().UTC().Add(time.Hour)
				ra := server.Add(4 * time.Second).Format(layout)
				f := &fakeRT{respond: script(r(503, "Date", server.Format(http.TimeFormat), "Retry-After", ra), r(200))}
				tr := newTransport(t, f, Config{RetryAfterJitter: -1})
				if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 200 {
					t.Fatalf("RoundTrip = %v, %v", res, err)
				}
				if g := gaps(f.Calls()); len(g) != 1 || g[0] != 4*time.Second {
					t.Errorf("Retry-After %q: gaps = %v, want [4s]", ra, g)
				}
			})
		})
	}
}

// TestRetryAfterAboveCap: a Retry-After above
// MaxRetryAfter is not shortened. The 429 comes back at once inside a
// *RetryAfterError that says how long the server asked for, and the host
// stays held for all of it (31 s, not the 30 s cap).
func TestRetryAfterAboveCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(429, "Retry-After", "31"), r(200))}
		var gu []GiveUp
		var waits []Wait
		tr := newTransport(t, f, Config{RetryAfterJitter: -1, Hooks: Hooks{
			OnGiveUp: func(g GiveUp) { gu = append(gu, g) },
			OnWait:   func(w Wait) { waits = append(waits, w) },
		}})
		c := &http.Client{Transport: tr}
		start := time.Now()
		res, err := c.Get(testURL)
		var rae *RetryAfterError
		if res != nil || !errors.As(err, &rae) {
			t.Fatalf("Get = %v, %v, want a *RetryAfterError", res, err)
		}
		if el := time.Since(start); el != 0 || len(f.Calls()) != 1 {
			t.Errorf("returned after %v and %d attempts, want at once after 1", el, len(f.Calls()))
		}
		if rae.Wait != 31*time.Second || rae.Max != 30*time.Second || rae.Host != "http://api.test" || !rae.Until.Equal(start.Add(31*time.Second)) {
			t.Errorf("RetryAfterError = %+v, want Wait 31s, Max 30s, Host http://api.test, Until start+31s", rae)
		}
		if rae.Response == nil || rae.Response.StatusCode != 429 || rae.Response.Header.Get("Retry-After") != "31" || rae.Response.Body != http.NoBody {
			t.Errorf("RetryAfterError.Response = %+v, want the 429 with its header and a closed body", rae.Response)
		}
		if !strings.Contains(err.Error(), "31s") || !strings.Contains(err.Error(), "MaxRetryAfter 30s") {
			t.Errorf("error %q does not say the wait and the cap", err)
		}
		if len(gu) != 1 || gu[0].Reason != GiveUpRetryAfterTooLong || gu[0].Status != 429 {
			t.Errorf("OnGiveUp = %+v, want retry-after-too-long", gu)
		}
		// The host is held the full 31 s.
		res, err = c.Get(testURL)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("next request: %v, %v, want 200 once the hold ends", res, err)
		}
		res.Body.Close()
		if el := time.Since(start); el != 31*time.Second {
			t.Errorf("next request went after %v, want 31s (the server's Retry-After, not the 30 s cap)", el)
		}
		if len(waits) != 1 || waits[0].Reason != WaitPacing || waits[0].Duration != 31*time.Second {
			t.Errorf("waits = %+v, want one pacing wait of 31s", waits)
		}
		// At the cap itself the request waits and retries.
		f = &fakeRT{respond: script(r(503, "Retry-After", "30"), r(200))}
		if res, err := get(t, newTransport(t, f, Config{RetryAfterJitter: -1}), "GET", testURL, nil); err != nil || res.StatusCode != 200 {
			t.Fatalf("Retry-After 30: %v, %v, want 200 on the retry", res, err)
		}
		if g := gaps(f.Calls()); len(g) != 1 || g[0] != 30*time.Second {
			t.Errorf("Retry-After 30: gaps = %v, want [30s]", g)
		}
		// Also for a request that would not have been retried.
		f = &fakeRT{respond: script(r(429, "Retry-After", "3600"))}
		if _, err := get(t, newTransport(t, f, Config{}), "POST", testURL, nil); !errors.As(err, &rae) || rae.Wait != time.Hour {
			t.Errorf("POST, Retry-After 3600: err = %v, want a *RetryAfterError of 1h", err)
		}
	})
}

func TestMalformedRetryAfterFallsBackToBackoff(t *testing.T) {
	for _, v := range []string{"1.5", "-3", "soon", "5s"} {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeRT{respond: script(r(429, "Retry-After", v), r(200))}
			var reasons []WaitReason
			tr := newTransport(t, f, Config{Rand: rand.NewPCG(1, 2), Hooks: Hooks{OnWait: func(w Wait) { reasons = append(reasons, w.Reason) }}})
			if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 200 {
				t.Fatalf("RoundTrip = %v, %v", res, err)
			}
			want := FullJitter(500*time.Millisecond, rand.New(rand.NewPCG(1, 2)).Float64())
			if g := gaps(f.Calls()); len(g) != 1 || g[0] != want {
				t.Errorf("Retry-After %q: gaps = %v, want [%v] (backoff of retry 1)", v, g, want)
			}
			if len(reasons) != 1 || reasons[0] != WaitBackoff {
				t.Errorf("Retry-After %q: reasons = %v, want [backoff]", v, reasons)
			}
		})
	}
}

func TestBackoffFullJitterSequence(t *testing.T) {
	// Without Retry-After, retry n waits u·min(cap, base·2^(n−1)) with u
	// drawn from the injected source: check against the same seeded stream.
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(503), r(503), r(503), r(503), r(503), r(503), r(200))}
		tr := newTransport(t, f, Config{MaxAttempts: 7, Base: time.Second, Cap: 8 * time.Second, Rand: rand.NewPCG(7, 7), Breaker: BreakerConfig{Disabled: true}})
		if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 200 {
			t.Fatalf("RoundTrip = %v, %v", res, err)
		}
		src := rand.New(rand.NewPCG(7, 7))
		ceil := []time.Duration{1, 2, 4, 8, 8, 8}
		g := gaps(f.Calls())
		if len(g) != len(ceil) {
			t.Fatalf("gaps = %v, want %d retries", g, len(ceil))
		}
		for i, c := range ceil {
			want := FullJitter(c*time.Second, src.Float64())
			if g[i] != want || g[i] < 0 || g[i] >= c*time.Second {
				t.Errorf("retry %d waited %v, want %v in [0, %v)", i+1, g[i], want, c*time.Second)
			}
		}
	})
}

func TestJitterSpreads(t *testing.T) {
	// Many clients' first retries must not all land together.
	seen := map[time.Duration]bool{}
	synctest.Test(t, func(t *testing.T) {
		tr := newTransport(t, &fakeRT{respond: script(r(503), r(200))}, Config{Rand: rand.NewPCG(3, 4), Breaker: BreakerConfig{Disabled: true}, DisablePacing: true})
		for range 50 {
			f := &fakeRT{respond: script(r(503), r(200))}
			tr.next = f
			get(t, tr, "GET", testURL, nil)
			g := gaps(f.Calls())[0]
			if g < 0 || g >= 500*time.Millisecond {
				t.Fatalf("first retry waited %v, want within [0, 500ms)", g)
			}
			seen[g] = true
		}
	})
	if len(seen) < 45 {
		t.Errorf("50 first retries used only %d distinct waits, want them spread", len(seen))
	}
}

func TestMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(429, "Retry-After", "1"))}
		var gu []GiveUp
		tr := newTransport(t, f, Config{MaxAttempts: 3, Hooks: Hooks{OnGiveUp: func(g GiveUp) { gu = append(gu, g) }}})
		res, err := get(t, tr, "GET", testURL, nil)
		if err != nil || res.StatusCode != 429 {
			t.Fatalf("RoundTrip = %v, %v, want the last 429", res, err)
		}
		if n := len(f.Calls()); n != 3 {
			t.Errorf("attempts = %d, want 3", n)
		}
		if len(gu) != 1 || gu[0].Reason != GiveUpAttempts || gu[0].Attempts != 3 || gu[0].Status != 429 {
			t.Errorf("OnGiveUp got %+v, want max-attempts after 3", gu)
		}
	})
}

func TestMaxElapsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(429, "Retry-After", "10"))}
		var gu []GiveUp
		tr := newTransport(t, f, Config{MaxElapsed: 15 * time.Second, RetryAfterJitter: -1, Hooks: Hooks{OnGiveUp: func(g GiveUp) { gu = append(gu, g) }}})
		start := time.Now()
		res, err := get(t, tr, "GET", testURL, nil)
		if err != nil || res.StatusCode != 429 {
			t.Fatalf("RoundTrip = %v, %v, want the last 429", res, err)
		}
		// 0 s, 10 s; a third attempt at 20 s would be past 15 s.
		if n, el := len(f.Calls()), time.Since(start); n != 2 || el != 10*time.Second {
			t.Errorf("attempts = %d after %v, want 2 after 10s", n, el)
		}
		if len(gu) != 1 || gu[0].Reason != GiveUpBudget {
			t.Errorf("OnGiveUp got %+v, want time-budget", gu)
		}
	})
}

func TestContextDeadlineWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(429, "Retry-After", "10"), r(200))}
		tr := newTransport(t, f, Config{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", testURL, nil)
		start := time.Now()
		res, err := tr.RoundTrip(req)
		if err != nil || res.StatusCode != 429 {
			t.Fatalf("RoundTrip = %v, %v, want the 429 at once", res, err)
		}
		res.Body.Close()
		if n, el := len(f.Calls()), time.Since(start); n != 1 || el != 0 {
			t.Errorf("attempts = %d after %v, want 1 after 0s: a 10 s wait cannot fit a 5 s deadline", n, el)
		}
	})
}

func TestCancelDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(429, "Retry-After", "10"), r(200))}
		tr := newTransport(t, f, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", testURL, nil)
		start := time.Now()
		res, err := tr.RoundTrip(req)
		if !errors.Is(err, context.Canceled) || res != nil {
			t.Fatalf("RoundTrip = %v, %v, want context.Canceled", res, err)
		}
		if n, el := len(f.Calls()), time.Since(start); n != 1 || el != time.Second {
			t.Errorf("attempts = %d, returned after %v, want 1 attempt and 1s", n, el)
		}
	})
}

func TestNonIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, m := range []string{"POST", "PATCH", "CONNECT"} {
			f := &fakeRT{respond: script(r(429, "Retry-After", "1"), r(200))}
			var gu []GiveUp
			tr := newTransport(t, f, Config{Hooks: Hooks{OnGiveUp: func(g GiveUp) { gu = append(gu, g) }}})
			res, err := get(t, tr, m, testURL, nil)
			if err != nil || res.StatusCode != 429 || len(f.Calls()) != 1 {
				t.Errorf("%s: RoundTrip = %v, %v after %d attempts, want the 429 after 1", m, res, err, len(f.Calls()))
			}
			if len(gu) != 1 || gu[0].Reason != GiveUpNotIdempotent {
				t.Errorf("%s: OnGiveUp = %+v, want not-idempotent", m, gu)
			}
		}
		for _, m := range []string{"GET", "HEAD", "OPTIONS", "PUT", "DELETE"} {
			f := &fakeRT{respond: script(r(429, "Retry-After", "1"), r(200))}
			if res, err := get(t, newTransport(t, f, Config{}), m, testURL, nil); err != nil || res.StatusCode != 200 || len(f.Calls()) != 2 {
				t.Errorf("%s: RoundTrip = %v, %v after %d attempts, want 200 after 2", m, res, err, len(f.Calls()))
			}
		}
	})
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestIdempotencyKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A caller's own key makes POST retryable, and is sent unchanged.
		f := &fakeRT{respond: script(r(503), r(200))}
		req, _ := http.NewRequest("POST", testURL, strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", `"abc"`)
		res, err := newTransport(t, f, Config{}).RoundTrip(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("POST with key: %v, %v", res, err)
		}
		cs := f.Calls()
		if len(cs) != 2 || cs[0].key != `"abc"` || cs[1].key != `"abc"` || cs[1].body != `{"amount":1}` {
			t.Errorf("POST with key: calls = %+v, want 2 with the same key and body", cs)
		}

		// AddIdempotencyKey: one fresh key for all attempts; the caller's
		// request is left untouched.
		f = &fakeRT{respond: script(r(429, "Retry-After", "1"), r(429, "Retry-After", "1"), r(200))}
		req, _ = http.NewRequest("PATCH", testURL, strings.NewReader("x"))
		res, err = newTransport(t, f, Config{AddIdempotencyKey: true}).RoundTrip(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("PATCH with AddIdempotencyKey: %v, %v", res, err)
		}
		cs = f.Calls()
		if len(cs) != 3 || cs[0].key == "" || cs[1].key != cs[0].key || cs[2].key != cs[0].key {
			t.Errorf("keys = %q, %q, %q, want one non-empty key on all 3 attempts", cs[0].key, cs[1].key, cs[2].key)
		}
		if !strings.HasPrefix(cs[0].key, `"`) || len(cs[0].key) != 38 {
			t.Errorf("generated key %s, want a quoted UUID", cs[0].key)
		}
		if it, err := httpsfv.UnmarshalItem([]string{cs[0].key}); err != nil || !uuidV4.MatchString(fmt.Sprint(it.Value)) {
			t.Errorf("generated key %s: %v, %v: want an sf-string holding a UUIDv4", cs[0].key, it.Value, err)
		}
		if req.Header.Get("Idempotency-Key") != "" {
			t.Error("the caller's request was modified")
		}

		// Two requests get different keys.
		f = &fakeRT{respond: script(r(200))}
		tr := newTransport(t, f, Config{AddIdempotencyKey: true})
		get(t, tr, "POST", testURL, nil)
		get(t, tr, "POST", testURL, nil)
		if cs := f.Calls(); cs[0].key == cs[1].key {
			t.Errorf("two requests share the key %s", cs[0].key)
		}
	})
}

func TestUnreplayableBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(503), r(200))}
		var gu []GiveUp
		tr := newTransport(t, f, Config{Hooks: Hooks{OnGiveUp: func(g GiveUp) { gu = append(gu, g) }}})
		req, _ := http.NewRequest("PUT", testURL, io.NopCloser(strings.NewReader("once"))) // no GetBody
		res, err := tr.RoundTrip(req)
		if err != nil || res.StatusCode != 503 || len(f.Calls()) != 1 {
			t.Errorf("unreplayable PUT: %v, %v after %d attempts, want the 503 after 1", res, err, len(f.Calls()))
		}
		if len(gu) != 1 || gu[0].Reason != GiveUpBodyNotReplayable {
			t.Errorf("OnGiveUp = %+v, want body-not-replayable", gu)
		}

		// GetBody that fails on replay: stop with the last response.
		f = &fakeRT{respond: script(r(503), r(200))}
		req, _ = http.NewRequest("PUT", testURL, strings.NewReader("x"))
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
		if res, err := newTransport(t, f, Config{}).RoundTrip(req); err != nil || res.StatusCode != 503 || len(f.Calls()) != 1 {
			t.Errorf("failing GetBody: %v, %v after %d attempts, want the 503 after 1", res, err, len(f.Calls()))
		}

		// A replayable body is sent whole on every attempt.
		f = &fakeRT{respond: script(r(503), r(503), r(200))}
		if res, err := get(t, newTransport(t, f, Config{}), "PUT", testURL, bytes.NewReader([]byte("payload"))); err != nil || res.StatusCode != 200 {
			t.Fatalf("replayable PUT: %v, %v", res, err)
		}
		for i, c := range f.Calls() {
			if c.body != "payload" {
				t.Errorf("attempt %d body = %q, want %q", i+1, c.body, "payload")
			}
		}
	})
}

type netErr struct{ timeout bool }

func (e netErr) Error() string   { return "dial tcp: connection refused" }
func (e netErr) Timeout() bool   { return e.timeout }
func (e netErr) Temporary() bool { return false }

func TestNetworkErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fail := func(err error) func(int, *http.Request) (*http.Response, error) {
			return func(n int, _ *http.Request) (*http.Response, error) {
				if n == 1 {
					return nil, err
				}
				return resp(200), nil
			}
		}
		var _ net.Error = netErr{}
		// Off by default.
		f := &fakeRT{respond: fail(netErr{})}
		if _, err := get(t, newTransport(t, f, Config{}), "GET", testURL, nil); err == nil || len(f.Calls()) != 1 {
			t.Errorf("default config retried a connection error (%d attempts, err %v)", len(f.Calls()), err)
		}
		for _, e := range []error{netErr{}, netErr{timeout: true}, io.ErrUnexpectedEOF} {
			f = &fakeRT{respond: fail(e)}
			res, err := get(t, newTransport(t, f, Config{RetryNetworkErrors: true}), "GET", testURL, nil)
			if err != nil || res.StatusCode != 200 || len(f.Calls()) != 2 {
				t.Errorf("RetryNetworkErrors, %v: %v, %v after %d attempts, want 200 after 2", e, res, err, len(f.Calls()))
			}
		}
		// Certificate errors are not transient; POST is never retried.
		cert := &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}
		f = &fakeRT{respond: fail(cert)}
		if _, err := get(t, newTransport(t, f, Config{RetryNetworkErrors: true}), "GET", testURL, nil); err == nil || len(f.Calls()) != 1 {
			t.Errorf("a certificate error was retried (%d attempts)", len(f.Calls()))
		}
		f = &fakeRT{respond: fail(netErr{timeout: true})}
		if _, err := get(t, newTransport(t, f, Config{RetryNetworkErrors: true}), "POST", testURL, nil); err == nil || len(f.Calls()) != 1 {
			t.Errorf("a POST timeout was retried (%d attempts)", len(f.Calls()))
		}
	})
}

func TestOtherStatusesNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, code := range []int{200, 400, 404, 500, 502, 504} {
			f := &fakeRT{respond: script(r(code, "Retry-After", "1"), r(200))}
			if res, _ := get(t, newTransport(t, f, Config{}), "GET", testURL, nil); res.StatusCode != code || len(f.Calls()) != 1 {
				t.Errorf("status %d: %d attempts, want 1", code, len(f.Calls()))
			}
		}
	})
}

// quotaServer answers like a fixed-window limiter with q requests per w and
// announces it with RateLimit-Policy and RateLimit.
type quotaServer struct {
	mu      sync.Mutex
	q       int
	w       time.Duration
	window  time.Time
	used    int
	refused int
	times   []time.Time
}

func (s *quotaServer) respond(_ int, _ *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.times = append(s.times, now)
	if s.window.IsZero() || now.Sub(s.window) >= s.w {
		s.window, s.used = now.Truncate(s.w), 0
	}
	left := s.window.Add(s.w).Sub(now)
	t := int((left + time.Second - 1) / time.Second)
	policy := `"q";q=` + itoa(s.q) + `;w=` + itoa(int(s.w/time.Second))
	if s.used >= s.q {
		s.refused++
		return resp(429, "RateLimit-Policy", policy, "RateLimit", `"q";r=0;t=`+itoa(t), "Retry-After", itoa(t)), nil
	}
	s.used++
	return resp(200, "RateLimit-Policy", policy, "RateLimit", `"q";r=`+itoa(s.q-s.used)+`;t=`+itoa(t)), nil
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestPacingStaysWithinQuota(t *testing.T) {
	// 8 goroutines × 10 requests against 5 per 2 s: after the first
	// response, the shared pacer keeps every later request within quota.
	synctest.Test(t, func(t *testing.T) {
		s := &quotaServer{q: 5, w: 2 * time.Second}
		f := &fakeRT{respond: s.respond}
		tr := newTransport(t, f, Config{MaxElapsed: -1, MaxAttempts: 1})
		get(t, tr, "GET", testURL, nil) // learn the policy
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 10 {
					if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 200 {
						t.Errorf("paced request: %v, %v, want 200", res, err)
					}
				}
			})
		}
		wg.Wait()
		if s.refused != 0 {
			t.Errorf("server refused %d requests, want 0: the pacer should keep within 5 per 2 s", s.refused)
		}
		// 81 requests at 5 per 2 s need at least 30 s.
		if el := s.times[len(s.times)-1].Sub(s.times[0]); el < 30*time.Second {
			t.Errorf("81 requests took %v, want >= 30s at 5 per 2 s", el)
		}
	})
}

func TestWithoutPacingTheQuotaIsHit(t *testing.T) {
	// The control for the test above: the same load unpaced is refused.
	synctest.Test(t, func(t *testing.T) {
		s := &quotaServer{q: 5, w: 2 * time.Second}
		tr := newTransport(t, &fakeRT{respond: s.respond}, Config{DisablePacing: true, MaxAttempts: 1})
		for range 20 {
			get(t, tr, "GET", testURL, nil)
		}
		if s.refused != 15 {
			t.Errorf("unpaced: server refused %d, want 15", s.refused)
		}
	})
}

func TestRetryAfterHoldsTheWholeHost(t *testing.T) {
	// One request's Retry-After also holds back another goroutine's new
	// request to the same host, but not to another host.
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: func(n int, req *http.Request) (*http.Response, error) {
			if n == 1 {
				return resp(429, "Retry-After", "2"), nil
			}
			return resp(200), nil
		}}
		var pacing []time.Duration
		tr := newTransport(t, f, Config{MaxAttempts: 1, RetryAfterJitter: -1, Hooks: Hooks{OnWait: func(w Wait) {
			if w.Reason == WaitPacing {
				pacing = append(pacing, w.Duration)
			}
		}}})
		get(t, tr, "GET", testURL, nil)
		start := time.Now()
		get(t, tr, "GET", "http://other.test/", nil)
		if el := time.Since(start); el != 0 {
			t.Errorf("another host waited %v, want 0", el)
		}
		get(t, tr, "GET", testURL, nil)
		if el := time.Since(start); el != 2*time.Second {
			t.Errorf("same host waited %v, want 2s", el)
		}
		if len(pacing) != 1 || pacing[0] != 2*time.Second {
			t.Errorf("pacing waits = %v, want [2s]", pacing)
		}
	})
}

func TestPacingBudget(t *testing.T) {
	// A pacing wait longer than the context allows fails fast, unsent.
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(200, "RateLimit", `"day";r=0;t=86400`), r(200))}
		tr := newTransport(t, f, Config{})
		get(t, tr, "GET", testURL, nil)
		start := time.Now()
		res, err := get(t, tr, "GET", testURL, nil)
		if !errors.Is(err, ErrBudgetExceeded) || res != nil {
			t.Errorf("RoundTrip = %v, %v, want ErrBudgetExceeded", res, err)
		}
		if n, el := len(f.Calls()), time.Since(start); n != 1 || el != 0 {
			t.Errorf("%d calls after %v, want 1 after 0s", n, el)
		}
	})
}

func TestPacingCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(200, "RateLimit", `"m";r=0;t=20`), r(200))}
		tr := newTransport(t, f, Config{})
		get(t, tr, "GET", testURL, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		time.AfterFunc(3*time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", testURL, nil)
		if _, err := tr.RoundTrip(req); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled during pacing: err = %v, want context.Canceled", err)
		}
		if n := len(f.Calls()); n != 1 {
			t.Errorf("%d calls, want 1", n)
		}
	})
}

// trickle is a response body that yields one byte every 50 ms (20 bytes/s)
// and never ends until it is closed; exited is closed when its writer stops.
func trickle() (body io.ReadCloser, exited chan struct{}) {
	pr, pw := io.Pipe()
	exited = make(chan struct{})
	go func() {
		defer close(exited)
		for {
			time.Sleep(50 * time.Millisecond)
			if _, err := pw.Write([]byte{'x'}); err != nil {
				return // the reader closed it
			}
		}
	}()
	return pr, exited
}

// TestSlowBodyDrainIsBounded, on the fake clock: a
// 429 whose body trickles at 20 bytes/s does not keep the request inside
// RoundTrip. The body is read only until the retry is due (here 1 s), then
// closed, and the retry goes on time.
func TestSlowBodyDrainIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var exited chan struct{}
		f := &fakeRT{respond: func(n int, _ *http.Request) (*http.Response, error) {
			if n == 1 {
				res := resp(429, "Retry-After", "1")
				res.Body, exited = trickle()
				return res, nil
			}
			return resp(200), nil
		}}
		tr := newTransport(t, f, Config{MaxElapsed: 2 * time.Second, RetryAfterJitter: -1})
		start := time.Now()
		res, err := get(t, tr, "GET", testURL, nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("RoundTrip = %v, %v, want 200 on the retry", res, err)
		}
		if el, g := time.Since(start), gaps(f.Calls()); el != time.Second || len(g) != 1 || g[0] != time.Second {
			t.Errorf("returned after %v with gaps %v, want 1s and [1s]: draining the slow body must not delay the retry", el, g)
		}
		// The trickling body was closed: its writer stops (else this blocks
		// and synctest reports the deadlock).
		<-exited
	})
}

// TestSlowBodyDrainLoopback: against a real HTTP server on 127.0.0.1 that
// answers 429 with Retry-After: 1 and then trickles its body at 20 bytes/s
// for as long as the connection lasts, the client stops draining the body
// when the retry is due instead of reading 64 KiB of it (almost an hour).
// Real time: about 1 s.
func TestSlowBodyDrainLoopback(t *testing.T) {
	var mu sync.Mutex
	var arrivals []time.Time
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		n := len(arrivals)
		mu.Unlock()
		if n > 1 {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := w.Write([]byte{'x'}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-tick.C:
			case <-r.Context().Done(): // the client closed the connection
				return
			case <-stop:
				return
			}
		}
	}))
	defer srv.Close()
	defer close(stop)

	tr, err := New(Config{MaxElapsed: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		res, err := tr.RoundTrip(mustRequest(t, srv.URL))
		if err != nil {
			done <- result{0, err}
			return
		}
		res.Body.Close()
		done <- result{res.StatusCode, nil}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.code != 200 {
			t.Fatalf("RoundTrip = %d, %v, want 200 on the retry", r.code, r.err)
		}
	case <-time.After(30 * time.Second): // a safety net, not a measurement
		t.Fatalf("RoundTrip still running after 30 s: the slow body is drained without a bound")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != 2 || arrivals[1].Sub(arrivals[0]) < time.Second {
		t.Errorf("server saw %d requests, the retry %v after the 429; want 2, at least 1 s apart", len(arrivals), arrivals[len(arrivals)-1].Sub(arrivals[0]))
	}
	t.Logf("RoundTrip took %v", time.Since(start))
}

func mustRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestHugeRateLimitWindowIsCapped, through the Transport: one
// response with RateLimit t=999999999 (31 years) holds the host for
// DefaultMaxHold (24 h), no more.
func TestHugeRateLimitWindowIsCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: script(r(200, "RateLimit", `"p";r=0;t=999999999`), r(200))}
		tr := newTransport(t, f, Config{MaxElapsed: -1})
		get(t, tr, "GET", testURL, nil)
		start := time.Now()
		if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 200 {
			t.Fatalf("second request: %v, %v", res, err)
		}
		if el := time.Since(start); el != DefaultMaxHold {
			t.Errorf("the second request waited %v, want the cap %v", el, DefaultMaxHold)
		}
	})
}

// TestHostsAreBounded: a Transport remembers at most maxHosts hosts, and
// when it must forget some it forgets idle ones, not a host it is holding.
func TestHostsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{respond: func(_ int, req *http.Request) (*http.Response, error) {
			if req.URL.Host == "held.test" {
				return resp(429, "Retry-After", "600"), nil
			}
			return resp(200), nil
		}}
		tr := newTransport(t, f, Config{MaxAttempts: 1})
		var rae *RetryAfterError
		if _, err := get(t, tr, "GET", "http://held.test/", nil); !errors.As(err, &rae) {
			t.Fatalf("held.test: %v, want a *RetryAfterError", err)
		}
		for i := range 5 * maxHosts {
			get(t, tr, "GET", "http://h"+itoa(i)+".test/", nil)
		}
		tr.mu.Lock()
		n, held := len(tr.hosts), tr.hosts["http://held.test"] != nil
		tr.mu.Unlock()
		if n > maxHosts || !held {
			t.Errorf("after %d hosts: %d remembered (want at most %d), held host kept: %v (want true)", 5*maxHosts+1, n, maxHosts, held)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://held.test/", nil)
		if _, err := tr.RoundTrip(req); !errors.Is(err, ErrBudgetExceeded) {
			t.Errorf("held.test after the flood of hosts: %v, want ErrBudgetExceeded (still held)", err)
		}
	})
}

// TestRetryAfterHerdIsSpread: 100 clients refused at the same instant with
// "Retry-After: 1" must not all come back at the same instant. The server here refuses everything before 1 s and accepts
// everything after. With the default jitter every client comes back in
// [1 s, 2 s) — never before the server's time — spread over that second.
// Both as 100 processes (a Transport each) and as 100 goroutines sharing one
// Transport, whose pacer holds the host for all of them.
func TestRetryAfterHerdIsSpread(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "separate", true: "shared"}[shared], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var mu sync.Mutex
				var late []time.Duration // requests after t = 0, since the start
				f := &fakeRT{respond: func(_ int, req *http.Request) (*http.Response, error) {
					mu.Lock()
					defer mu.Unlock()
					if el := time.Since(start); el > 0 {
						late = append(late, el)
					}
					if time.Since(start) < time.Second {
						return resp(429, "Retry-After", "1"), nil
					}
					return resp(200), nil
				}}
				one := newTransport(t, f, Config{})
				var wg sync.WaitGroup
				for i := range 100 {
					tr := one
					if !shared {
						tr = newTransport(t, f, Config{})
					}
					wg.Go(func() {
						if res, err := get(t, tr, "GET", testURL, nil); err != nil || res.StatusCode != 200 {
							t.Errorf("client %d: %v, %v, want 200", i, res, err)
						}
					})
				}
				wg.Wait()
				distinct := map[time.Duration]bool{}
				lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
				for _, el := range late {
					if el < time.Second || el >= 2*time.Second {
						t.Errorf("a client came back at %v, want in [1s, 2s): not before the server's time, at most 1 s of jitter after", el)
					}
					distinct[el] = true
					lo, hi = min(lo, el), max(hi, el)
				}
				if len(late) != 100 || len(distinct) < 95 || hi-lo < 500*time.Millisecond {
					t.Errorf("%d clients came back at %d distinct instants over %v, want 100 spread over more than 500 ms", len(late), len(distinct), hi-lo)
				}
			})
		})
	}
}

// TestRetryAfterJitterKeepsTheBudget: the jitter never makes a request give
// up that would have fitted its deadline without it.
func TestRetryAfterJitterKeepsTheBudget(t *testing.T) {
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeRT{respond: script(r(429, "Retry-After", "5"), r(200))}
			tr := newTransport(t, f, Config{Rand: rand.NewPCG(seed, 1)})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second+100*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", testURL, nil)
			res, err := tr.RoundTrip(req)
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("seed %d: %v, %v, want 200 on the retry", seed, res, err)
			}
			if g := gaps(f.Calls()); len(g) != 1 || g[0] < 5*time.Second || g[0] >= 5*time.Second+100*time.Millisecond {
				t.Errorf("seed %d: gaps %v, want one in [5s, 5.1s)", seed, g)
			}
		})
	}
}
