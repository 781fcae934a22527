// Package browsertest starts a real headless Chromium for tests, driven by
// github.com/chromedp/chromedp: Debian's chromium package, with a fresh
// profile and everything that would reach the network turned off (this
// project's machines have no network but the loopback).
package browsertest

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/portero-rl/portero/internal/testenv"
)

// Flags are the switches Chromium is started with, besides a fresh
// --user-data-dir.
var Flags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync"}

// New starts Chromium (failing the test under CI when it is missing, see
// testenv.NeedCommand) and returns a chromedp context for one tab of a
// window of width×height CSS pixels, and the browser's context. Both end
// with the test; timeout bounds everything done in them.
func New(t testing.TB, width, height int, timeout time.Duration) context.Context {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height))
	for _, f := range Flags {
		opts = append(opts, chromedp.Flag(f[2:], true))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", path, err)
	}
	return bctx
}

// chromium finds Debian's chromium (or another Chromium build on PATH).
func chromium(t testing.TB) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return testenv.NeedCommand(t, "chromium")
}
