package httplimit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/policy/policytest"
)

// oracleRefusal is the 429 body as the middleware first wrote it, with
// json.Marshal: the fast path must produce the same bytes.
func oracleRefusal(v *policy.Verdict, retry int64) []byte {
	p := Problem{Type: ProblemQuotaExceeded, Title: "Too Many Requests", Status: http.StatusTooManyRequests, RetryAfter: retry}
	for _, i := range v.Violated {
		p.ViolatedPolicies = append(p.ViolatedPolicies, v.Results[i].Rule.Name)
	}
	if len(v.Violated) > 0 {
		res := &v.Results[v.Violated[0]]
		q, win := res.Rule.Quota()
		p.Detail = fmt.Sprintf("rule %q allows %d per %s for this client; retry in %d s", res.Rule.Name, q, win, p.RetryAfter)
	}
	b, _ := json.Marshal(p)
	return append(b, '\n')
}

// oraclePolicy formats RateLimit-Policy member by member, without the
// values prepared per policy.
func oraclePolicy(v *policy.Verdict) string {
	var b []byte
	for i := range v.Results {
		if r := v.Results[i].Rule; !r.Shadow() {
			if len(b) > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendQuote(b, r.Name)
			q, w := r.Quota()
			b = fmt.Appendf(b, ";q=%d", q)
			if r.Cost.Unit() != "" {
				b = fmt.Appendf(b, ";qu=%q", r.Cost.Unit())
			}
			b = fmt.Appendf(b, ";w=%d", max(ceilSeconds(w), 1))
		}
	}
	return string(b)
}

// TestPreparedMatchesOracle checks that the responses assembled from the
// parts prepared per policy equal the ones formatted from scratch, for
// refusals by one and by several rules, windows shorter than a second
// (whose Duration.String has a µ), shadow rules and rules that do not
// apply to every request.
func TestPreparedMatchesOracle(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mk := func(name, key, limit string, alg portero.Algorithm, mods ...func(*policy.Rule)) policy.Rule {
		r := policy.Rule{Name: name, Key: policy.MustParseKey(key), Algorithm: alg, Limit: portero.MustParseLimit(limit)}
		for _, m := range mods {
			m(&r)
		}
		return r
	}
	p, err := policy.New([]policy.Rule{
		mk("per-ip", "ip", "3/min", portero.FixedWindow),
		mk("dark", "ip", "1/min", portero.FixedWindow, func(r *policy.Rule) { r.Mode = policy.Shadow }),
		mk("tiny.window", "ip", "2/500ms", portero.SlidingCounter),
		mk("bytes", "ip", "10000/h", portero.FixedWindow, func(r *policy.Rule) { r.Cost, _ = policy.ParseCost("content-length") }),
		mk("post:only/x_y", "global", "3/h", portero.GCRA, func(r *policy.Rule) { r.Match.Methods = []string{"POST"} }),
	}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pre := prepare(p)
	store := &policytest.Store{}
	refusals, multi := 0, 0
	for i := range 12 {
		now = now.Add(200 * time.Millisecond)
		for _, method := range []string{"GET", "POST"} {
			req := &policy.Request{Method: method, Path: "/", Header: http.Header{}, ClientIP: netip.MustParseAddr("192.0.2.1"), ContentLength: 100}
			var v policy.Verdict
			if err := p.EvaluateInto(ctx, store, now, req, &v); err != nil {
				t.Fatal(err)
			}
			var fast, slow headerSet
			retry := fast.verdict(&v, true, pre)
			if r2 := slow.verdict(&v, true, nil); r2 != retry {
				t.Fatalf("request %d %s: retry %d with prepared parts, %d without", i, method, retry, r2)
			}
			hf, hsl := http.Header{}, http.Header{}
			fast.apply(hf)
			slow.apply(hsl)
			if fmt.Sprint(hf) != fmt.Sprint(hsl) {
				t.Errorf("request %d %s: headers\n%v with prepared parts,\n%v without", i, method, hf, hsl)
			}
			if got, want := hf.Get("RateLimit-Policy"), oraclePolicy(&v); got != want {
				t.Errorf("request %d %s: RateLimit-Policy = %s, want %s", i, method, got, want)
			}
			if v.Allowed {
				continue
			}
			refusals++
			if len(v.Violated) > 1 {
				multi++
			}
			if got, want := string(appendRefusal(nil, &v, retry, pre)), string(oracleRefusal(&v, retry)); got != want {
				t.Errorf("request %d %s: body\n%s\nwant\n%s", i, method, got, want)
			}
		}
	}
	if refusals == 0 || multi == 0 {
		t.Errorf("%d refusals, %d by several rules: the test no longer covers them", refusals, multi)
	}
}

// TestHeaderValuesDoNotShareCapacity checks that appending to one header
// set by the middleware cannot overwrite another: they are cut from one
// slice.
func TestHeaderValuesDoNotShareCapacity(t *testing.T) {
	var hs headerSet
	hs.static("A", "a")
	hs.int("B", 12345)
	hs.static("C", "c")
	h := http.Header{}
	hs.apply(h)
	h.Add("A", "x")
	h.Add("B", "y")
	if got := fmt.Sprint(h["A"], h["B"], h["C"]); got != "[a x] [12345 y] [c]" {
		t.Errorf("after Add: %s, want [a x] [12345 y] [c]", got)
	}
}

// fixedStore allows every hit without allocating, so that allocation
// counts measure the middleware alone.
type fixedStore struct{ decs []portero.Decision }

func (s *fixedStore) AllowAll(_ context.Context, _ time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	for i := range hits {
		s.decs[i] = portero.Decision{Allowed: true, Limit: 100, Remaining: 50, ResetAfter: time.Second}
	}
	return s.decs[:len(hits)], nil
}
func (s *fixedStore) Peek(context.Context, portero.Rule, string, time.Time) (portero.Decision, error) {
	return portero.Decision{Allowed: true, Limit: 100, Remaining: 50, ResetAfter: time.Second}, nil
}
func (s *fixedStore) Reset(context.Context, portero.Rule, string) error { return nil }
func (s *fixedStore) Close(context.Context) error                       { return nil }

// TestAllowedAllocations keeps the allowed path lean: one store key for
// the two rules keyed by ip (they share it), none for the global rule, and
// two for the headers whatever their number (one string, one []string).
func TestAllowedAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	p, err := policy.New([]policy.Rule{
		{Name: "per-ip", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("100/s")},
		{Name: "per-ip-min", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("1000/min")},
		{Name: "global", Key: policy.MustParseKey("global"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("1000/s")},
	}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Policy: p, Store: &fixedStore{decs: make([]portero.Decision, 8)}, LegacyHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r, _ := http.NewRequest("GET", "http://example.com/items/1", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	w := &headerOnly{h: http.Header{}}
	h.ServeHTTP(w, r)
	if got := w.h.Get("RateLimit"); got != `"per-ip";r=50;t=1, "per-ip-min";r=50;t=1, "global";r=50;t=1` {
		t.Fatalf("RateLimit = %s", got)
	}
	if n := testing.AllocsPerRun(100, func() { clear(w.h); h.ServeHTTP(w, r) }); n > 3 {
		t.Errorf("%v allocations per allowed request, want at most 3", n)
	}
}

type headerOnly struct{ h http.Header }

func (w *headerOnly) Header() http.Header         { return w.h }
func (w *headerOnly) Write(p []byte) (int, error) { return len(p), nil }
func (w *headerOnly) WriteHeader(int)             {}
