package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/testenv"
)

// TestServeAccessLogRotation: portero serve --access-log, its file renamed
// as logrotate does, then a real SIGUSR1 to the process: the lines before
// stay in the renamed file, the next ones go to a new file of the old
// name.
func TestServeAccessLogRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errb := &testenv.Buffer{}, &testenv.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--drain-period", "0",
			"--access-log", path, "--access-log-format", "text"}, out, errb)
	}()
	re := regexp.MustCompile(`gateway listening on (http://\S+)`)
	var gw string
	for deadline := time.Now().Add(20 * time.Second); gw == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			gw = m[1]
		}
	}
	if gw == "" {
		t.Fatalf("no address printed\nstdout:\n%s\nstderr:\n%s", out, errb)
	}
	getPath := func(p string) {
		res, err := http.Get(gw + p)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	waitLines := func(p string, n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if b, _ := os.ReadFile(p); strings.Count(string(b), "\n") == n {
				return
			}
		}
		b, _ := os.ReadFile(p)
		t.Fatalf("%s never had %d lines:\n%s\nstderr:\n%s", p, n, b, errb)
	}
	getPath("/before")
	waitLines(path, 1)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(errb.String(), "access log reopened"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no reopen after SIGUSR1:\n%s", errb)
		}
	}
	getPath("/after")
	waitLines(path, 1)
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if !strings.Contains(string(old), "path=/before") || !strings.Contains(string(cur), "path=/after") || strings.Contains(string(cur), "/before") {
		t.Errorf("rotated file:\n%s\nnew file:\n%s", old, cur)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}
