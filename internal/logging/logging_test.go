package logging

import (
	"bytes"
	"encoding/json"
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestParseLevel(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want slog.Level
		err  string
	}{
		{"debug", slog.LevelDebug, ""},
		{"INFO", slog.LevelInfo, ""},
		{"warn", slog.LevelWarn, ""},
		{"warning", slog.LevelWarn, ""},
		{"error", slog.LevelError, ""},
		{"loud", 0, `log level "loud": want one of debug, info, warn, error`},
		{"", 0, `log level "": want one of`},
	} {
		got, err := ParseLevel(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseLevel(%q) = %v, %v, want error %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseLevel(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
}

// TestNew: JSON lines at the level and above, and the standard log package
// writes through the same handler.
func TestNew(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	defer log.SetOutput(log.Writer())
	defer log.SetFlags(log.Flags())
	var b bytes.Buffer
	l, err := New(&b, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	l.Debug("hidden")
	l.Warn("shown", "k", 1)
	log.Printf("from the log package") // at INFO, slog's level for it
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (the warning and the log package's line):\n%s", len(lines), b.String())
	}
	for i, want := range []string{"shown", "from the log package"} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatalf("line %d %q is not JSON: %v", i, lines[i], err)
		}
		if m["msg"] != want {
			t.Errorf("line %d msg = %v, want %q", i, m["msg"], want)
		}
	}
	if _, err := New(&b, "xml", "info"); err == nil || !strings.Contains(err.Error(), `log format "xml": want one of text, json`) {
		t.Errorf("New(format xml) error = %v", err)
	}
	if _, err := New(&b, "text", "loud"); err == nil || !strings.Contains(err.Error(), "debug, info, warn, error") {
		t.Errorf("New(level loud) error = %v", err)
	}
}

// TestSampler: at most N lines a second per name, each name on its own, and
// the first line of a new second says how many were held back.
func TestSampler(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	s := NewSampler(2)
	type step struct {
		name       string
		at         time.Duration
		ok         bool
		suppressed int64
	}
	for i, st := range []step{
		{"a", 0, true, 0},
		{"a", 100 * time.Millisecond, true, 0},
		{"a", 200 * time.Millisecond, false, 0},
		{"b", 300 * time.Millisecond, true, 0}, // another rule has its own budget
		{"a", 900 * time.Millisecond, false, 0},
		{"a", 1000 * time.Millisecond, true, 2}, // a new second: two were held back
		{"a", 1100 * time.Millisecond, true, 0},
		{"a", 1200 * time.Millisecond, false, 0},
		{"b", 1200 * time.Millisecond, true, 0},
	} {
		ok, n := s.Allow(st.name, t0.Add(st.at))
		if ok != st.ok || n != st.suppressed {
			t.Errorf("step %d: Allow(%q, +%v) = %v, %d, want %v, %d", i, st.name, st.at, ok, n, st.ok, st.suppressed)
		}
	}
	all := NewSampler(0)
	none := NewSampler(-1)
	for i := range 100 {
		if ok, _ := all.Allow("a", t0); !ok {
			t.Fatalf("NewSampler(0) held back line %d", i)
		}
		if ok, _ := none.Allow("a", t0); ok {
			t.Fatalf("NewSampler(-1) let line %d through", i)
		}
	}
}
