package dashboard

import (
	"bytes"
	"fmt"
	"image/png"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/portero-rl/portero/internal/browsertest"
)

// The page in a real headless Chromium: the login form, the numbers of
// the source, a live update without a reload, a phone's width without
// sideways scrolling, and screenshots that decode as PNGs of the window's
// size. (internal/server's TestDashboardServe does the same against a
// running portero serve and its metrics.)
func TestDashboardInBrowser(t *testing.T) {
	src := newFake()
	d := New(src, Options{Token: func() string { return "s3cret" }})
	d.Sample(time.Now())
	src.add("per-ip", "allowed", 10)
	src.add("per-ip", "refused", 6)
	d.Sample(time.Now())
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close) // after the browser's cleanup, which ends its event stream
	t.Cleanup(d.Close)

	ctx := browsertest.New(t, 1280, 900, 2*time.Minute)
	refused := `document.querySelector('[data-rule="per-ip"] .v-refused')?.textContent`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/dashboard/"),
		chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, "s3cret"),
		chromedp.Submit(`#token`),
		chromedp.WaitVisible(`[data-rule="per-ip"]`),
	); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](refused+` === "6"`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](refused))
		t.Fatalf("per-ip refused shows %q, want 6: %v", got, err)
	}
	// Live: a new sample reaches the page by its event stream, without a
	// reload (the marker set on the window survives).
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("live").textContent === "live"`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the page never said live: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__marker = true`)); err != nil {
		t.Fatal(err)
	}
	src.add("per-ip", "refused", 7)
	d.Sample(time.Now())
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](refused+` === "13" && window.__marker === true`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](refused))
		t.Fatalf("after 7 more refusals per-ip shows %q, want 13 without a reload: %v", got, err)
	}
	for _, c := range []struct {
		name          string
		width, height int
	}{{"laptop", 1280, 900}, {"phone", 390, 844}} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(c.width), int64(c.height)), chromedp.Sleep(200*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		overflow, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - document.documentElement.clientWidth`))
		if err != nil || overflow > 0 {
			t.Errorf("%s: the page is %d px wider than the window (%v)", c.name, overflow, err)
		}
		b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s screenshot: %v", c.name, err)
		}
		if got := img.Bounds().Size(); got.X != c.width || got.Y != c.height {
			t.Errorf("%s screenshot is %v, want %dx%d", c.name, got, c.width, c.height)
		}
		if dir := os.Getenv("PORTERO_SCREENSHOTS"); dir != "" {
			os.WriteFile(fmt.Sprintf("%s/dashboard-%s.png", dir, c.name), b, 0o644)
		}
	}
}
