package server_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/portero-rl/portero/internal/browsertest"
	"github.com/portero-rl/portero/internal/server"
)

// metricValue reads one series of the admin's /metrics.
func metricValue(t *testing.T, admin, token, series string) float64 {
	t.Helper()
	_, _, body := get(t, admin+"/metrics", "Authorization", "Bearer "+token)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func burst(t *testing.T, gw string, n int) (refused int) {
	t.Helper()
	for range n {
		res, err := http.Get(gw + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusTooManyRequests {
			refused++
		}
	}
	return refused
}

// TestDashboardServe: a running portero serve's dashboard in a real
// headless Chromium, behind the admin token (typed into its login form):
// after a scripted burst it shows the allowed and refused counts and the
// refused key that /metrics and /api/refused report; a second burst
// reaches the page without a reload; screenshots decode as PNGs of the
// window's size.
func TestDashboardServe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, path, `admin: {token: s3cret}
upstreams: {d: {type: demo}}
routes: [{upstream: d}]
rules:
  - {name: per-client, key: ip, algorithm: token-bucket, limit: 1/min burst 10}
  - {name: daily, key: ip, limit: 500/day}
`)
	r := start(t, server.Options{ConfigPath: path})
	if refused := burst(t, r.gateway, 25); refused != 15 {
		t.Fatalf("burst of 25 against a burst of 10: %d refused, want 15", refused)
	}
	ctx := browsertest.New(t, 1280, 900, 3*time.Minute)
	step, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(step,
		chromedp.Navigate(r.admin+"/"), // redirected to the dashboard, which asks for the token
		chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, "s3cret"),
		chromedp.Submit(`#token`),
		chromedp.WaitVisible(`[data-rule="per-client"]`),
	); err != nil {
		t.Fatal(err)
	}
	shows := func(want map[string]string) {
		t.Helper()
		var conds []string
		for sel, v := range want {
			conds = append(conds, fmt.Sprintf(`document.querySelector(%q)?.textContent === %q`, sel, v))
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](strings.Join(conds, " && "), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			var got []string
			for sel := range want {
				v, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q)?.textContent || "(none)"`, sel)))
				got = append(got, sel+" = "+v)
			}
			t.Fatalf("the page does not show %v: it shows %v (%v)", want, got, err)
		}
	}
	value := func(outcome string) string {
		return strconv.Itoa(int(metricValue(t, r.admin, "s3cret", fmt.Sprintf(`portero_decisions_total{outcome=%q,rule="per-client"}`, outcome))))
	}
	if value("refused") != "15" || value("allowed")+value("near-limit") == "00" {
		t.Fatalf("metrics: refused %s, allowed %s, near-limit %s", value("refused"), value("allowed"), value("near-limit"))
	}
	allowed := func() string {
		a, _ := strconv.Atoi(value("allowed"))
		n, _ := strconv.Atoi(value("near-limit"))
		return strconv.Itoa(a + n)
	}
	shows(map[string]string{
		`[data-rule="per-client"] .v-refused`:          value("refused"),
		`[data-rule="per-client"] .v-allowed`:          allowed(),
		`#top tr[data-key="ip=127.0.0.1/32"] .v-count`: "15",
		`[data-rule="daily"] .v-allowed`:               "10", // the daily quota counted only the 10 let through
		`[data-testid="store-state"]`:                  "memory store healthy",
		`#quotas tr:first-child td:nth-child(3)`:       "10 / 500",
		`[data-testid="live"]`:                         "live",
	})
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__marker = true`)); err != nil {
		t.Fatal(err)
	}
	if refused := burst(t, r.gateway, 5); refused != 5 {
		t.Fatalf("second burst: %d refused, want 5", refused)
	}
	shows(map[string]string{`[data-rule="per-client"] .v-refused`: "20", `#top tr[data-key="ip=127.0.0.1/32"] .v-count`: "20"})
	if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__marker === true`)); err != nil || !ok {
		t.Errorf("the page was reloaded to show the second burst (%v)", err)
	}
	for _, size := range [][2]int{{1280, 900}, {390, 844}} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(size[0]), int64(size[1])), chromedp.Sleep(200*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if got := img.Bounds().Size(); got.X != size[0] || got.Y != size[1] {
			t.Errorf("screenshot is %v, want %dx%d", got, size[0], size[1])
		}
		if dir := os.Getenv("PORTERO_SCREENSHOTS"); dir != "" {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("serve-%dx%d.png", size[0], size[1])), b, 0o644)
		}
	}
	if err := r.stop(); err != nil { // the page's event stream must not hold the shutdown
		t.Errorf("Run: %v", err)
	}
}

// TestDashboardRLS: portero rls mounts the same dashboard on its admin
// listener, behind its token, and a real Chromium shows what its
// configuration and its decisions say: every configured limit, with or
// without traffic, as the file writes it ("4/minute") and in its mode (a
// shadow_mode limit is shadow); the refusals /metrics counts; the key
// closest to its limit; a login page styled before the token is given;
// and rule cards that count the window the charts show, not the time since
// the start. The decisions and the dashboard's samples run on the test's
// clock.
func TestDashboardRLS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	writeFile(t, path, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 4}\n"+
		"  - key: path\n    value: /export\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	t0 := time.Unix(1_700_000_040, 0) // the start of a minute
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	ticks := make(chan time.Time)
	tick := func(at time.Time) { clock.Store(at.UnixNano()); ticks <- at }
	r := startRLS(t, server.RLSOptions{ConfigPath: path, AdminToken: "s3cret", DashboardTicks: ticks,
		Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	sampled := func(at time.Time) {
		t.Helper()
		waitFor(t, "the dashboard's sample at "+at.String(), func() bool {
			_, _, st := get(t, r.admin+"/dashboard/state", "Authorization", "Bearer s3cret")
			return strings.Contains(st, fmt.Sprintf(`"now":%d,`, at.UnixMilli()))
		})
	}
	tick(t0) // before any decision
	for range 10 {
		if code := check(t, r.http); code != http.StatusOK { // refusals too: the check API answers them in its body
			t.Fatalf("/v1/check = %d", code)
		}
	}
	if code, _, _ := get(t, r.admin+"/dashboard/state"); code != http.StatusUnauthorized {
		t.Errorf("the dashboard without the token = %d, want 401", code)
	}
	if code, _, css := get(t, r.admin+"/dashboard/app.css"); code != http.StatusOK || !strings.Contains(css, ".login{") {
		t.Errorf("the login page's style sheet without the token = %d, want 200 and the style", code)
	}
	metric := metricValue(t, r.admin, "s3cret", `portero_rls_decisions_total{domain="edge",key="remote_address",outcome="refused"}`)
	if metric != 6 {
		t.Fatalf("metrics say %v refused, want 6 (10 checks against 4/min)", metric)
	}
	tick(t0.Add(time.Second))
	sampled(t0.Add(time.Second))

	ctx := browsertest.New(t, 1280, 900, 2*time.Minute)
	step, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(step, chromedp.Navigate(r.admin+"/"), chromedp.WaitVisible(`#token`)); err != nil {
		t.Fatal(err)
	}
	if display, err := chromedp.Run(step, chromedp.Evaluate[string](`getComputedStyle(document.body).display`)); err != nil || display != "flex" {
		t.Errorf("the login page's body is display %q (%v), want flex: its style sheet did not load", display, err)
	}
	if err := chromedp.Do(step,
		chromedp.SendKeys(`#token`, "s3cret"),
		chromedp.Submit(`#token`),
		chromedp.WaitVisible(`[data-rule="edge remote_address"]`),
	); err != nil {
		t.Fatal(err)
	}
	const addr, shadow = `[data-rule="edge remote_address"]`, `[data-rule="edge path_/export"]`
	text := func(sel string) string {
		return `document.querySelector(` + strconv.Quote(sel) + `)?.textContent`
	}
	shows := func(what, sel, want string) {
		t.Helper()
		if _, err := chromedp.Run(step, chromedp.Poll[bool](text(sel)+` === `+strconv.Quote(want), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			got, _ := chromedp.Run(step, chromedp.Evaluate[string](text(sel)+` || "(none)"`))
			t.Errorf("%s: %s shows %q, want %q", what, sel, got, want)
		}
	}
	shows("refusals", addr+" .v-refused", "6")
	shows("a limit as the file writes it", addr+" .limit", "4/minute · remote_address")
	shows("a configured limit without traffic", shadow+" .limit", "10/second · path_/export")
	shows("a shadow_mode limit", shadow+" .badge.shadow", "shadow")
	shows("the configuration's mode of a shadow_mode limit", `#config-rules tr:nth-child(2) td:nth-child(5)`, "shadow")
	shows("the key closest to its limit", `#near tr:first-child td:first-child`, "edge remote_address")
	shows("how much of its limit it used", `#near tr:first-child td:nth-child(3)`, "4 / 4")

	// 900 more samples without a decision: the history (15 minutes) no
	// longer holds the second in which the six were refused, so the card
	// counts none; two decisions in a new minute are the window's two
	// allowed, not the six allowed since the start.
	for i := range 900 {
		tick(t0.Add(time.Duration(i+2) * time.Second))
	}
	shows("refusals of the last 15 minutes", addr+" .v-refused", "0")
	for range 2 {
		check(t, r.http)
	}
	tick(t0.Add(902 * time.Second))
	shows("allowed in the last 15 minutes", addr+" .v-allowed", "2")
	if err := r.stop(t); err != nil {
		t.Errorf("RunRLS = %v", err)
	}
}
