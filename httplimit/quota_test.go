package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// A calendar quota stacked with a rate: the 429 of a spent quota says it is
// a quota and sends the client to the next period (Madrid's midnight), the
// 429 of the rate does not.
func TestQuotaRefusal(t *testing.T) {
	c := newClock() // 2026-03-01 12:00 UTC, 13:00 in Madrid
	srv, _ := serve(t, httplimit.Config{Now: c.Now},
		rule(t, "rate", "ip", "1/s"),
		rule(t, "daily", "ip", "2/day tz Europe/Madrid", func(r *policy.Rule) { r.Algorithm = "" }),
	)
	problem := func(body []byte) httplimit.Problem {
		t.Helper()
		var p httplimit.Problem
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		return p
	}
	if resp, _ := do(t, "GET", srv.URL+"/", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("first: status %d", resp.StatusCode)
	}
	resp, body := do(t, "GET", srv.URL+"/", nil, "")
	if p := problem(body); resp.StatusCode != 429 || fmt.Sprint(p.ViolatedPolicies) != "[rate]" || strings.Contains(p.Detail, "quota of") {
		t.Fatalf("second at once: %d %+v, want the rate's 429", resp.StatusCode, p)
	}
	c.Add(time.Second)
	if resp, _ := do(t, "GET", srv.URL+"/", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("a second later: status %d, want the quota's second unit", resp.StatusCode)
	}
	c.Add(time.Hour)
	resp, body = do(t, "GET", srv.URL+"/", nil, "")
	p := problem(body)
	// 13:00:01 → 14:00:01 in Madrid; midnight (23:00 UTC) is 9 h 59 min 59 s away.
	const left = 9*3600 + 59*60 + 59
	if resp.StatusCode != http.StatusTooManyRequests || fmt.Sprint(p.ViolatedPolicies) != "[daily]" || p.RetryAfter != left ||
		resp.Header.Get("Retry-After") != fmt.Sprint(left) {
		t.Fatalf("spent quota: %d Retry-After %q %+v, want 429 from daily, %d s", resp.StatusCode, resp.Header.Get("Retry-After"), p, left)
	}
	if want := fmt.Sprintf(`rule "daily" is a quota of 2 per calendar day (Europe/Madrid) for this client, spent for this day; retry in %d s`, left); p.Detail != want {
		t.Errorf("detail %q, want %q", p.Detail, want)
	}
	if pol := checkSF(t, resp.Header, "RateLimit-Policy")["daily"]; fmt.Sprint(pol) != "map[q:2 w:86400]" {
		t.Errorf("RateLimit-Policy daily = %v, want q=2;w=86400", pol)
	}
	c.Add(left * time.Second)
	if resp, _ := do(t, "GET", srv.URL+"/", nil, ""); resp.StatusCode != 200 {
		t.Errorf("at Madrid's midnight: status %d, want the quota back", resp.StatusCode)
	}
}

// A day whose midnight a spring change skips starts at the change: Santiago
// goes from 00:00 −04 to 01:00 −03 on 6 September 2026 (04:00 UTC), so
// 23:30 −04 on the 5th is still the 5th and a spent 1/day waits until 04:00
// UTC, through the memory store behind the middleware.
func TestQuotaDayAfterSkippedMidnight(t *testing.T) {
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	c := &clock{t: time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC)}
	srv, _ := serve(t, httplimit.Config{Now: c.Now, Store: st},
		rule(t, "daily", "ip", "1/day tz America/Santiago", func(r *policy.Rule) { r.Algorithm = "" }))
	if resp, _ := do(t, "GET", srv.URL+"/", nil, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("08:00 on the 5th: status %d, want 200", resp.StatusCode)
	}
	c.Add(15*time.Hour + 30*time.Minute) // 03:30 UTC, 23:30 −04
	resp, _ := do(t, "GET", srv.URL+"/", nil, "")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1800" {
		t.Fatalf("23:30 on the 5th: status %d, Retry-After %q; want 429, 1800 (the day ends at 04:00 UTC)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	c.Add(30 * time.Minute)
	if resp, _ := do(t, "GET", srv.URL+"/", nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("01:00 −03 on the 6th: status %d, want 200", resp.StatusCode)
	}
}
