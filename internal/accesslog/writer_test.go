package accesslog

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func entry(i int) *Entry {
	return &Entry{Time: time.Unix(1700000000, int64(i)).UTC(), Method: "GET", Path: "/x", Peer: "127.0.0.1",
		ClientIP: "127.0.0.1", ContentLength: 0, Status: 200, Decision: "allowed", Rule: "r", Key: "k"}
}

// gate is a file whose writes block until it is opened, and that says when
// the first write started.
type gate struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	started chan struct{}
	once    sync.Once
	open    chan struct{}
}

func (g *gate) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.started) })
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

func (g *gate) Close() error { return nil }

// A slow disk never blocks Log: once the writer is stuck in a write, the
// buffer takes Buffer lines and every further entry is dropped and
// counted; the file then says how many are missing.
func TestDropWhenFull(t *testing.T) {
	g := &gate{started: make(chan struct{}), open: make(chan struct{})}
	const buffer = 8
	w, err := New(Options{Path: "x", Buffer: buffer, Open: func(string) (io.WriteCloser, error) { return g, nil }})
	if err != nil {
		t.Fatal(err)
	}
	w.Log(entry(0))
	<-g.started // the goroutine holds line 0 and waits in Write
	for i := 1; i <= buffer+5; i++ {
		w.Log(entry(i)) // must return at once; the test would hang otherwise
	}
	if got := w.Dropped(); got != 5 {
		t.Errorf("Dropped() = %d, want 5 (buffer %d full)", got, buffer)
	}
	close(g.open)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(g.buf.String(), "\n"), "\n")
	if len(lines) != buffer+2 {
		t.Fatalf("wrote %d lines, want %d entries and the dropped line:\n%s", len(lines), buffer+1, g.buf.String())
	}
	var e Entry
	var de *DroppedError
	if err := ParseJSON([]byte(lines[len(lines)-1]), &e); !errors.As(err, &de) || de.N != 5 {
		t.Errorf("last line %s: ParseJSON = %v, want a DroppedError of 5", lines[len(lines)-1], err)
	}
	for i, l := range lines[:buffer+1] {
		if err := ParseJSON([]byte(l), &e); err != nil || e.Time.Nanosecond() != i {
			t.Errorf("line %d: %s: %v, nanosecond %d", i, l, err, e.Time.Nanosecond())
		}
	}
	w.Log(entry(99))
	if w.Dropped() != 6 {
		t.Errorf("Log after Close: Dropped() = %d, want 6", w.Dropped())
	}
}

// Rotation: rename the file, Reopen, and the next lines go to a new file
// of the old name while the renamed one keeps every line before.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	w, err := New(Options{Path: path, Format: "text"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 3 {
		w.Log(entry(i))
	}
	waitWritten(t, w, 3)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	w.Log(entry(3)) // still to the renamed file: it is open
	waitWritten(t, w, 4)
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
	w.Log(entry(4))
	w.Log(entry(5))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if n := strings.Count(string(old), "\n"); n != 4 {
		t.Errorf("renamed file has %d lines, want 4:\n%s", n, old)
	}
	if n := strings.Count(string(cur), "\n"); n != 2 || !strings.Contains(string(cur), ".000000004Z") {
		t.Errorf("new file has %d lines, want 2 starting with entry 4:\n%s", n, cur)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("new file: %v, mode %v, want 0640", err, fi.Mode().Perm())
	}
}

// A Reopen that cannot open the file keeps writing to the old one.
func TestReopenFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "access.log")
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := New(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	w.Log(entry(0))
	waitWritten(t, w, 1)
	if err := os.Rename(filepath.Dir(path), filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err == nil {
		t.Error("Reopen into a missing directory: no error")
	}
	w.Log(entry(1))
	w.Close()
	b, _ := os.ReadFile(filepath.Join(dir, "gone", "access.log"))
	if n := strings.Count(string(b), "\n"); n != 2 {
		t.Errorf("old file has %d lines, want 2 (the writer kept it)", n)
	}
}

func waitWritten(t *testing.T, w *Writer, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for w.Written() < n {
		if time.Now().After(deadline) {
			t.Fatalf("Written() = %d after 30s, want %d", w.Written(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestOptionsErrors(t *testing.T) {
	for _, o := range []Options{{}, {Path: "-", Format: "xml"}, {Path: "-", Buffer: -1}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
}
