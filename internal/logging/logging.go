// Package logging is the one way Portero's commands log: a log/slog logger
// writing text or JSON at a level chosen by name (New), which every part
// of a command logs to, and a Sampler that keeps a line repeated on every
// request (a refusal) to a few a second.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Levels are the level names ParseLevel accepts, quietest last.
var Levels = []string{"debug", "info", "warn", "error"}

// Formats are the format names New accepts.
var Formats = []string{"text", "json"}

// ParseLevel returns the level named s (one of Levels, in any case). The
// error lists the names that exist.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log level %q: want one of %s", s, strings.Join(Levels, ", "))
}

// New returns a logger writing to w in format (text or json) the lines at
// level and above, and makes it slog's default, so that a library writing
// through the standard log package lands in the same stream. The error
// names the setting that is wrong and lists the values that exist.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	l, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("log format %q: want one of %s", format, strings.Join(Formats, ", "))
	}
	logger := slog.New(h)
	slog.SetDefault(logger)
	return logger, nil
}

// DefaultPerSecond is the Sampler rate the commands use unless told
// otherwise: enough to see who is refused, too few to flood a log.
const DefaultPerSecond = 5

// Sampler lets at most a fixed number of lines a second through for each
// name (a rule's), and counts the ones it holds back for the next line to
// say: a fixed window of package algorithm, as Portero limits clients.
// Names must come from a bounded set (configured rules), never from a
// client: it keeps state per name. Safe for concurrent use.
type Sampler struct {
	dec   algorithm.Decider // nil: every line passes
	off   bool              // no line passes
	mu    sync.Mutex
	names map[string]*sampled
}

type sampled struct {
	st         algorithm.State
	found      bool
	suppressed int64
}

// NewSampler returns a sampler that lets perSecond lines a second through
// for each name; 0 lets every line through and a negative rate none.
func NewSampler(perSecond int) *Sampler {
	s := &Sampler{names: map[string]*sampled{}}
	switch {
	case perSecond < 0:
		s.off = true
	case perSecond > 0:
		// A valid limit by construction (positive count, one second).
		s.dec, _ = algorithm.New(portero.FixedWindow, portero.Limit{Count: int64(perSecond), Window: time.Second})
	}
	return s
}

// Allow reports whether a line for name at instant now may be written, and
// when it may, how many lines for name were held back since the last one
// written. A nil Sampler lets every line through.
func (s *Sampler) Allow(name string, now time.Time) (ok bool, suppressed int64) {
	if s == nil || (s.dec == nil && !s.off) {
		return true, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.names[name]
	if e == nil {
		e = &sampled{}
		s.names[name] = e
	}
	if s.off {
		e.suppressed++
		return false, 0
	}
	st, d := s.dec.Decide(e.st, e.found, now.UnixNano(), 1)
	if !d.Allowed {
		e.suppressed++
		return false, 0
	}
	e.st, e.found = st, true
	n := e.suppressed
	e.suppressed = 0
	return true, n
}
