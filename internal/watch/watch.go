// Package watch tells a command when its configuration (one file, or a
// directory of files) has changed and settled, so that it reloads once per
// change and never a half-written file: the one watcher of `portero serve
// --watch` and `portero rls --watch`.
//
// Two sources say "something may have changed": fsnotify events in the
// directories that hold the configuration (any event there: a Kubernetes
// ConfigMap update renames a symlink, ..data, beside the file and never
// touches the file's own name) and a slow poll for what notifications
// cannot see (a symlink swapped higher up, a network file system). Each
// only schedules a look at the content. A change is reported when the
// content (every regular file under the path, symlinks followed: names,
// sizes, SHA-256) differs from what was last reported and is the same at
// two looks one settle period apart, so a writer pausing mid-file for less
// than that delays the reload rather than publishing half a file.
package watch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Defaults for the zero values of Options.
const (
	DefaultSettle = 100 * time.Millisecond
	DefaultPoll   = 2 * time.Second
)

// Options configure a Watcher; the zero value of each field means its
// default.
type Options struct {
	// Settle is how long a new content must stay the same before it is
	// reported: it is looked at one Settle after the event that announced
	// it, and reported at the next look if it has not changed; a content
	// that lasts less than Settle is never reported. DefaultSettle when
	// zero (`portero serve --watch-settle`).
	Settle time.Duration
	// Poll is how often the content is looked at without an event;
	// DefaultPoll when zero, negative for never.
	Poll time.Duration
	// NoNotify turns fsnotify off: only the poll looks.
	NoNotify bool
	// Logger receives the watcher's own trouble (a directory it cannot
	// watch); slog.Default() when nil.
	Logger *slog.Logger
}

// Watcher reports settled changes of a configuration path on C. Its one
// goroutine runs until Close.
type Watcher struct {
	// C receives one value per settled change (a change reported while
	// the last is not yet taken is merged with it), and is closed by Close.
	C <-chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
	fsw    *fsnotify.Watcher
	settle time.Duration
}

// New watches path (a file or a directory) from now on: the content at
// the time of the call is the baseline, reported as no change. It fails
// only when path cannot be read at all; fsnotify trouble is logged and
// leaves the poll to do the work.
func New(path string, o Options) (*Watcher, error) {
	o = o.withDefaults()
	base, err := Fingerprint(path)
	if err != nil {
		return nil, err
	}
	c := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{C: c, cancel: cancel, done: make(chan struct{}), settle: o.Settle}
	var notify <-chan struct{}
	if !o.NoNotify {
		if fsw, err := fsnotify.NewWatcher(); err != nil {
			o.Logger.Warn("watch: file notifications unavailable; polling only", "path", path, "every", o.Poll, "err", err)
		} else {
			w.fsw = fsw
			for _, dir := range dirsOf(path) {
				if err := fsw.Add(dir); err != nil {
					o.Logger.Warn("watch: cannot watch a directory; polling it", "dir", dir, "err", err)
				}
			}
			n := make(chan struct{}, 1)
			notify = n
			go forward(ctx, fsw, n, o.Logger)
		}
	}
	l := &loop{path: path, o: o, notify: notify, out: c, last: base}
	go func() {
		defer close(w.done)
		defer close(c)
		l.run(ctx)
	}()
	return w, nil
}

// Settle returns the settle period in force (Options.Settle or its
// default).
func (w *Watcher) Settle() time.Duration { return w.settle }

// Close stops the watcher and waits for its goroutines.
func (w *Watcher) Close() error {
	w.cancel()
	var err error
	if w.fsw != nil {
		err = w.fsw.Close()
	}
	<-w.done
	return err
}

func (o Options) withDefaults() Options {
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
	if o.Poll == 0 {
		o.Poll = DefaultPoll
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// dirsOf returns the directories whose entries hold path's content: the
// directory of a file (where editors and the kubelet rename), and for a
// directory the directory itself and its parent (where a symlink to it is
// swapped).
func dirsOf(path string) []string {
	fi, err := os.Stat(path)
	if err == nil && fi.IsDir() {
		return []string{path, filepath.Dir(filepath.Clean(path))}
	}
	return []string{filepath.Dir(path)}
}

// forward turns fsnotify's events into a nudge on n until ctx is done or
// the watcher closes.
func forward(ctx context.Context, fsw *fsnotify.Watcher, n chan<- struct{}, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-fsw.Events:
			if !ok {
				return
			}
			select {
			case n <- struct{}{}:
			default:
			}
		case err, ok := <-fsw.Errors:
			if !ok {
				return
			}
			log.Warn("watch: file notifications", "err", err)
			select { // events may have been lost: look
			case n <- struct{}{}:
			default:
			}
		}
	}
}

// loop is the watcher's state: what was last reported and what is being
// confirmed. Time comes only from timers, so that a test can run it in a
// testing/synctest bubble with its own notify channel.
type loop struct {
	path      string
	o         Options
	notify    <-chan struct{}
	out       chan<- struct{}
	last      []byte // fingerprint last reported (or the baseline)
	candidate []byte // a new fingerprint seen once, waiting to be seen again
}

func (l *loop) run(ctx context.Context) {
	var poll <-chan time.Time
	if l.o.Poll > 0 {
		t := time.NewTicker(l.o.Poll)
		defer t.Stop()
		poll = t.C
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	arm := func() { timer.Reset(l.o.Settle); armed = true }
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.notify:
			// Something moved: look one interval from now. An event while
			// a look is due does not postpone it (a directory that changes
			// all the time must not starve the configuration): the look
			// compares content, so a change in between is seen anyway.
			if !armed {
				arm()
			}
		case <-poll:
			if !armed {
				l.look(arm)
			}
		case <-timer.C:
			armed = false
			l.look(arm)
		}
	}
}

// look reads the content and reports it, or starts or continues its
// confirmation.
func (l *loop) look(arm func()) {
	fp, err := Fingerprint(l.path)
	switch {
	case err != nil:
		// Mid-swap (a file or link briefly missing), or gone: look again
		// later; nothing is reported for content that cannot be read.
		l.candidate = nil
		l.o.Logger.Debug("watch: cannot read the configuration; looking again", "path", l.path, "err", err)
	case bytes.Equal(fp, l.last):
		l.candidate = nil
	case bytes.Equal(fp, l.candidate):
		l.last, l.candidate = fp, nil
		select {
		case l.out <- struct{}{}:
		default: // one is pending already: the reader will load this content
		}
	default:
		l.candidate = fp
		arm()
	}
}

// Fingerprint is a digest of the content under path: for a file its bytes,
// for a directory the name, size and bytes of every regular file below it
// (symlinks followed, entries whose names start with a dot skipped, as the
// kubelet's ..data and timestamped directories are reached through the
// links beside them). Equal content gives equal fingerprints.
func Fingerprint(path string) ([]byte, error) {
	root, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	if !fi.IsDir() {
		if err := hashFile(h, "", root); err != nil {
			return nil, err
		}
		return h.Sum(nil), nil
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		st, err := os.Stat(p) // follows a symlink to a file
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a dangling link is no content
			}
			return err
		}
		if !st.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		return hashFile(h, rel, p)
	})
	if err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

func hashFile(h io.Writer, name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(name)))
	h.Write(n[:])
	io.WriteString(h, name)
	size, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint64(n[:], uint64(size)) // the size closes each file's bytes
	h.Write(n[:])
	return nil
}
