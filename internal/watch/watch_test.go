package watch

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

const (
	v1 = "rules:\n  - {name: a, key: ip, limit: 10/min}\n"
	v2 = "rules:\n  - {name: a, key: ip, limit: 10/min}\n  - {name: b, key: ip, limit: 20/min}\n"
)

// TestPausedWriterIsNotPublished runs the watcher's loop on synctest's
// clock, with the file events sent by the test as fsnotify would send them,
// while a writer writes a file in two parts with a pause in between (the
// first part alone is a valid configuration, so a loader could not tell it
// was half a file). Every report must find the whole file, and there must
// be exactly one. (A reload one settle period after the last event alone
// would publish the first part after any pause longer than that.)
func TestPausedWriterIsNotPublished(t *testing.T) {
	for _, pause := range []time.Duration{10 * time.Millisecond, 90 * time.Millisecond, 150 * time.Millisecond, 190 * time.Millisecond} {
		t.Run(pause.String(), func(t *testing.T) {
			if seen := pausedWriter(t, DefaultSettle, pause); len(seen) != 1 || seen[0] != v2 {
				t.Errorf("writer pausing %v between two parts: reports found %q, want exactly one with the whole file", pause, seen)
			}
		})
	}
}

// TestSettlePeriod: the settle period is the operator's (Options.Settle,
// serve's --watch-settle). At the default, 100 ms, a writer pausing 300 ms
// mid-file publishes its first part, as docs/configuration.md says; with a
// settle period of 1 s, pauses of 300 ms and 900 ms publish only the whole
// file, once.
func TestSettlePeriod(t *testing.T) {
	if seen := pausedWriter(t, DefaultSettle, 300*time.Millisecond); len(seen) != 2 || seen[0] != v2[:len(v1)] || seen[1] != v2 {
		t.Errorf("settle %v, pause 300ms: reports found %q, want the first part, then the whole file", DefaultSettle, seen)
	}
	for _, pause := range []time.Duration{300 * time.Millisecond, 900 * time.Millisecond} {
		if seen := pausedWriter(t, time.Second, pause); len(seen) != 1 || seen[0] != v2 {
			t.Errorf("settle 1s, pause %v: reports found %q, want exactly one with the whole file", pause, seen)
		}
	}
}

// pausedWriter runs the loop with settle period settle in a synctest
// bubble while a writer writes v2 in two parts, v1's length first, with a
// pause between, and returns the content found at each report.
func pausedWriter(t *testing.T, settle, pause time.Duration) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "portero.yaml")
	if err := os.WriteFile(path, []byte("rules: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var seen []string
	synctest.Test(t, func(t *testing.T) {
		notify := make(chan struct{}, 1)
		out := make(chan struct{}, 1)
		base, err := Fingerprint(path)
		if err != nil {
			t.Fatal(err)
		}
		l := &loop{path: path, o: Options{Settle: settle, Poll: -1, Logger: slog.New(slog.DiscardHandler)},
			notify: notify, out: out, last: base}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); l.run(ctx) }()
		var mu sync.Mutex
		reader := make(chan struct{})
		go func() {
			defer close(reader)
			for {
				select {
				case <-ctx.Done():
					return
				case <-out:
					b, _ := os.ReadFile(path)
					mu.Lock()
					seen = append(seen, string(b))
					mu.Unlock()
				}
			}
		}()
		event := func() {
			select {
			case notify <- struct{}{}:
			default:
			}
		}
		// The writer: truncate and write the first part, pause, write
		// the rest; each write is an fsnotify Write event.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		half := len(v1)
		f.Write([]byte(v2[:half]))
		event()
		time.Sleep(pause)
		f.Write([]byte(v2[half:]))
		f.Close()
		event()
		time.Sleep(10 * settle)
		synctest.Wait()
		cancel()
		<-done
		<-reader
	})
	return seen
}

// TestNoReportWithoutChange: events that leave the content as it was (a
// touch, a rewrite of the same bytes) report nothing.
func TestNoReportWithoutChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "portero.yaml")
	os.WriteFile(path, []byte(v1), 0o644)
	synctest.Test(t, func(t *testing.T) {
		notify := make(chan struct{}, 1)
		out := make(chan struct{}, 1)
		base, _ := Fingerprint(path)
		l := &loop{path: path, o: Options{Settle: 100 * time.Millisecond, Poll: time.Second, Logger: slog.New(slog.DiscardHandler)},
			notify: notify, out: out, last: base}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go l.run(ctx)
		for range 5 {
			os.WriteFile(path, []byte(v1), 0o644)
			notify <- struct{}{}
			time.Sleep(300 * time.Millisecond)
		}
		time.Sleep(3 * time.Second) // three polls
		synctest.Wait()
		select {
		case <-out:
			t.Error("a change was reported for content that did not change")
		default:
		}
	})
}

// kubelet publishes a ConfigMap's new content in dir exactly as the
// kubelet's atomic writer does: a new timestamped directory with the
// files, a ..data_tmp symlink to it, renamed over ..data, and the old
// directory removed. The file the program reads, dir/NAME, is a symlink
// to ..data/NAME that never changes.
func kubelet(t *testing.T, dir, name, content string, gen int) {
	t.Helper()
	ts := "..2026_05_01_10_00_0" + string(rune('0'+gen)) + ".123456789"
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ts, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	} else if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func receive(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case <-w.C:
	case <-time.After(10 * time.Second):
		t.Fatalf("no change reported within 10 s after %s", what)
	}
}

// TestKubernetesConfigMapSwap replays the kubelet's update of a mounted
// ConfigMap with notifications only (no poll): each update is reported
// once, with the new content readable through the unchanged path.
func TestKubernetesConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	kubelet(t, dir, "portero.yaml", v1, 1)
	path := filepath.Join(dir, "portero.yaml")
	w, err := New(path, Options{Settle: 20 * time.Millisecond, Poll: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for gen, content := range []string{v2, v1 + "# third\n"} {
		kubelet(t, dir, "portero.yaml", content, gen+2)
		receive(t, w, "the kubelet's swap")
		if b, _ := os.ReadFile(path); string(b) != content {
			t.Fatalf("update %d: reported, but the file reads %q, want %q", gen+2, b, content)
		}
		select {
		case <-w.C:
			t.Fatalf("update %d reported twice", gen+2)
		case <-time.After(200 * time.Millisecond): // ten settle periods
		}
	}
}

// TestDirectorySymlinkSwap: a directory of files reached through a
// symlink that is swapped (envoyproxy/ratelimit's runtime layout) is seen
// by the poll.
func TestDirectorySymlinkSwap(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"v1/ratelimit/config", "v2/ratelimit/config"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "v1/ratelimit/config/a.yaml"), []byte(v1), 0o644)
	os.WriteFile(filepath.Join(root, "v2/ratelimit/config/a.yaml"), []byte(v2), 0o644)
	os.Symlink("v1", filepath.Join(root, "current"))
	path := filepath.Join(root, "current/ratelimit/config")
	w, err := New(path, Options{Settle: 20 * time.Millisecond, Poll: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.Symlink("v2", filepath.Join(root, "current.tmp"))
	os.Rename(filepath.Join(root, "current.tmp"), filepath.Join(root, "current"))
	receive(t, w, "the swap of current")
}

func TestFingerprint(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fp := func(p string) []byte {
		t.Helper()
		b, err := Fingerprint(filepath.Join(dir, p))
		if err != nil {
			t.Fatalf("Fingerprint(%s): %v", p, err)
		}
		return b
	}
	write("d/a.yaml", "x")
	write("d/b.yaml", "y")
	a := fp("d")
	write("d/..2026/hidden.yaml", "z") // a dot entry is not content
	os.Symlink("nowhere", filepath.Join(dir, "d/dangling.yaml"))
	if !bytes.Equal(fp("d"), a) {
		t.Error("a dot directory or a dangling link changed a directory's fingerprint")
	}
	write("d/a.yaml", "xy")
	write("d/b.yaml", "")
	if bytes.Equal(fp("d"), a) {
		t.Error("moving a byte from one file to another left the fingerprint alone")
	}
	write("d/b.yaml", "y")
	write("d/a.yaml", "x")
	if !bytes.Equal(fp("d"), a) {
		t.Error("the same content gave another fingerprint")
	}
	if _, err := Fingerprint(filepath.Join(dir, "none")); err == nil || !strings.Contains(err.Error(), "none") {
		t.Errorf("Fingerprint of a missing path: %v", err)
	}
}
