package accesslog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBuffer is the number of lines a Writer holds for the disk before
// it drops: at about 400 bytes a line, 1.6 MB.
const DefaultBuffer = 4096

// Options configure a Writer.
type Options struct {
	// Path is the file to append to (created 0640 when missing), or "-"
	// for Stdout (nil: os.Stdout); required. Format is "json" (when empty)
	// or "text".
	Path, Format string
	Stdout       io.Writer
	// Buffer is the most lines waiting for the disk, beyond which an entry
	// is dropped and counted; 0 means DefaultBuffer.
	Buffer int
	// Open opens Path for appending (nil: os.OpenFile with O_APPEND); a
	// test's makes a slow disk.
	Open func(path string) (io.WriteCloser, error)
}

// Writer writes entries from a goroutine of its own, so that a request
// only formats its line and hands it over. It is safe for concurrent use.
type Writer struct {
	opts    Options
	text    bool
	lines   chan *[]byte
	reopen  chan chan error
	done    chan struct{}
	stopped chan struct{}
	closed  atomic.Bool
	dropped atomic.Int64
	written atomic.Int64
	errs    atomic.Int64
	lastErr atomic.Pointer[error]
}

var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// New opens the file and starts the writer.
func New(o Options) (*Writer, error) {
	switch o.Format {
	case "", "json", "text":
	default:
		return nil, fmt.Errorf("access log format %q: want json or text", o.Format)
	}
	if o.Path == "" {
		return nil, errors.New("access log: a path (or - for stdout) is required")
	}
	if o.Buffer == 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Buffer < 0 {
		return nil, fmt.Errorf("access log buffer %d: must not be negative", o.Buffer)
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Open == nil {
		o.Open = func(path string) (io.WriteCloser, error) {
			return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		}
	}
	w := &Writer{opts: o, text: o.Format == "text", lines: make(chan *[]byte, o.Buffer),
		reopen: make(chan chan error), done: make(chan struct{}), stopped: make(chan struct{})}
	f, err := w.open()
	if err != nil {
		return nil, err
	}
	go w.run(f)
	return w, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func (w *Writer) open() (io.WriteCloser, error) {
	if w.opts.Path == "-" {
		return nopCloser{w.opts.Stdout}, nil
	}
	f, err := w.opts.Open(w.opts.Path)
	if err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	return f, nil
}

// Log formats e and queues it, never waiting for the disk: when the buffer
// is full, or after Close, the entry is dropped and counted.
func (w *Writer) Log(e *Entry) {
	if w.closed.Load() {
		w.dropped.Add(1)
		return
	}
	bp := linePool.Get().(*[]byte)
	if w.text {
		*bp = AppendText((*bp)[:0], e)
	} else {
		*bp = AppendJSON((*bp)[:0], e)
	}
	select {
	case w.lines <- bp:
	default:
		w.dropped.Add(1)
		putLine(bp)
	}
}

func putLine(bp *[]byte) {
	if cap(*bp) > 16<<10 {
		return
	}
	linePool.Put(bp)
}

// Dropped returns the number of entries dropped so far.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Written returns the number of lines written so far.
func (w *Writer) Written() int64 { return w.written.Load() }

// Errors returns the number of failed writes and the last error, nil when
// none failed.
func (w *Writer) Errors() (int64, error) {
	if p := w.lastErr.Load(); p != nil {
		return w.errs.Load(), *p
	}
	return 0, nil
}

// Reopen flushes and closes the file and opens Path again: after a log
// rotator renamed it, the next lines go to a new file of that name. On
// error the writer keeps the old file.
func (w *Writer) Reopen() error {
	if w.closed.Load() {
		return errors.New("access log: closed")
	}
	reply := make(chan error, 1)
	select {
	case w.reopen <- reply:
		return <-reply
	case <-w.stopped:
		return errors.New("access log: closed")
	}
}

// Close writes what is queued, closes the file and stops the goroutine.
func (w *Writer) Close() error {
	if w.closed.Swap(true) {
		<-w.stopped
		return nil
	}
	close(w.done)
	<-w.stopped
	_, err := w.Errors()
	return err
}

func (w *Writer) fail(err error) {
	w.errs.Add(1)
	w.lastErr.Store(&err)
}

// run is the writer's goroutine: it writes lines through a buffer and
// flushes whenever nothing more is waiting.
func (w *Writer) run(f io.WriteCloser) {
	defer close(w.stopped)
	bw := bufio.NewWriterSize(f, 64<<10)
	var reported int64 // drops already written as a line
	write := func(bp *[]byte) {
		if _, err := bw.Write(*bp); err != nil {
			w.fail(err)
		} else {
			w.written.Add(1)
		}
		putLine(bp)
	}
	flush := func() {
		if d := w.dropped.Load(); d > reported {
			// Say in the file itself that lines are missing, and how many.
			line := `{"time":"` + time.Now().UTC().Format(time.RFC3339Nano) + `","dropped":` + strconv.FormatInt(d-reported, 10) + "}\n"
			if w.text {
				line = "time=" + time.Now().UTC().Format(time.RFC3339Nano) + " dropped=" + strconv.FormatInt(d-reported, 10) + "\n"
			}
			if _, err := bw.WriteString(line); err != nil {
				w.fail(err)
			}
			reported = d
		}
		if err := bw.Flush(); err != nil {
			w.fail(err)
			bw.Reset(f) // drop what could not be written rather than retry forever
		}
	}
	// drain writes the lines already waiting, without blocking.
	drain := func() {
		for {
			select {
			case bp := <-w.lines:
				write(bp)
			default:
				return
			}
		}
	}
	for {
		select {
		case bp := <-w.lines:
			write(bp)
			// Take what is already waiting before flushing: one write for
			// a burst.
			drain()
			flush()
		case reply := <-w.reopen:
			flush()
			nf, err := w.open()
			if err != nil {
				reply <- err
				continue
			}
			if err := f.Close(); err != nil {
				w.fail(err)
			}
			f = nf
			bw.Reset(f)
			reply <- nil
		case <-w.done:
			drain()
			flush()
			if err := f.Close(); err != nil {
				w.fail(err)
			}
			return
		}
	}
}
