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
// listener, behind its token: after a burst of refusals through /v1/check
// its state shows the descriptor's refused count that /metrics reports
// and the refused key, and the page in a real Chromium shows them.
func TestDashboardRLS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	writeFile(t, path, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 4}\n")
	r := startRLS(t, server.RLSOptions{ConfigPath: path, AdminToken: "s3cret"})
	for range 10 {
		if code := check(t, r.http); code != http.StatusOK { // refusals too: the check API answers them in its body
			t.Fatalf("/v1/check = %d", code)
		}
	}
	if code, _, _ := get(t, r.admin+"/dashboard/state"); code != http.StatusUnauthorized {
		t.Errorf("the dashboard without the token = %d, want 401", code)
	}
	metric := metricValue(t, r.admin, "s3cret", `portero_rls_decisions_total{domain="edge",key="remote_address",outcome="refused"}`)
	if metric != 6 {
		t.Fatalf("metrics say %v refused, want 6 (10 checks against 4/min)", metric)
	}
	waitFor(t, "the dashboard's state to show the refusals", func() bool {
		_, _, st := get(t, r.admin+"/dashboard/state", "Authorization", "Bearer s3cret")
		return strings.Contains(st, `"name":"edge remote_address"`) && strings.Contains(st, `"refused":6`) &&
			strings.Contains(st, `"service":"portero rls"`) && strings.Contains(st, `"count":6`)
	})
	ctx := browsertest.New(t, 1280, 900, 2*time.Minute)
	step, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(step,
		chromedp.Navigate(r.admin+"/"),
		chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, "s3cret"),
		chromedp.Submit(`#token`),
		chromedp.WaitVisible(`[data-rule="edge remote_address"]`),
	); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(step, chromedp.Poll[bool](`document.querySelector('[data-rule="edge remote_address"] .v-refused')?.textContent === "6"`)); err != nil {
		got, _ := chromedp.Run(step, chromedp.Evaluate[string](`document.querySelector('[data-rule="edge remote_address"] .v-refused')?.textContent || "(none)"`))
		t.Fatalf("the page shows %q refused, want 6: %v", got, err)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("RunRLS = %v", err)
	}
}
