package nginxtest

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

func TestStart(t *testing.T) {
	s := Start(t, `
    server {
        listen {{LISTEN}};
        location / { return 200 "hello from nginx\n"; }
    }`)
	resp, err := http.Get(s.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "hello from nginx\n" || !strings.HasPrefix(resp.Header.Get("Server"), "nginx") {
		t.Errorf("GET / = %d %q (Server %q)", resp.StatusCode, body, resp.Header.Get("Server"))
	}
}

// outcomeTB records whether a test helper failed or skipped the test.
type outcomeTB struct {
	testing.TB
	failed, skipped bool
}

func (o *outcomeTB) Fatalf(string, ...any) { o.failed = true; runtime.Goexit() }
func (o *outcomeTB) Skip(...any)           { o.skipped = true; runtime.Goexit() }

// TestMissingNginxFails: without nginx, on PATH or in sbinPaths, Binary
// fails the test, outside CI too: it never skips.
func TestMissingNginxFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "")
	saved := sbinPaths
	sbinPaths = []string{t.TempDir() + "/nginx"}
	defer func() { sbinPaths = saved }()
	o := &outcomeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Binary(o)
	}()
	<-done
	if !o.failed || o.skipped {
		t.Errorf("Binary without nginx: failed %v, skipped %v; want failed", o.failed, o.skipped)
	}
}
