package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/portero-rl/portero/internal/accesslog"
)

// MaxLineBytes is the longest line read; a longer one is malformed, and
// reading it costs no more memory than this.
const MaxLineBytes = 64 << 10

// Formats lists the names --log-format takes besides nginx:FORMAT and
// apache:FORMAT.
var Formats = []string{"combined", "main", "json", "csv"}

// InputOptions say how to read the logs.
type InputOptions struct {
	// Format is a name of Formats, "nginx:" or "apache:" and a log format,
	// or empty to detect it from each file's first line.
	Format string
	Host   string // of requests whose log records none
	// ReorderWindow is how far back a line may be from the latest read and
	// still be decided in arrival order (a slow request is logged after
	// faster later ones); 0 means DefaultReorderWindow.
	ReorderWindow time.Duration
	ReorderMax    int // lines held to reorder one file; 0 means DefaultReorderMax
	// Headers and RespHeaders, when not nil, are the only request and
	// response headers of text logs to keep.
	Headers     []string
	Query       bool // keep the query strings (policy.Policy.ReadsQuery)
	RespHeaders []string
}

// Defaults of InputOptions.
const (
	DefaultReorderWindow = 10 * time.Second
	DefaultReorderMax    = 1 << 15
)

// lineReader reads lines of at most MaxLineBytes.
type lineReader struct {
	r    *bufio.Reader
	line int
}

// next returns the next line without its newline, or io.EOF. A line too
// long is skipped whole and reported as an error (errTooLong).
func (l *lineReader) next() ([]byte, error) {
	b, err := l.r.ReadSlice('\n')
	l.line++
	switch {
	case err == nil:
		return b[:len(b)-1], nil
	case errors.Is(err, bufio.ErrBufferFull):
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = l.r.ReadSlice('\n')
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		return nil, errTooLong
	case err == io.EOF && len(b) > 0:
		return b, nil
	}
	return nil, err
}

var errTooLong = malformed("longer than %d KiB", MaxLineBytes>>10)

// input is one log file, read in its format and put back in arrival order.
type input struct {
	name    string
	index   int
	lr      lineReader
	closer  io.Closer
	parse   func(line []byte, r *Request) error
	reorder bool
	window  time.Duration
	max     int
	host    string

	held    requestHeap // read, not yet released
	latest  time.Time   // latest arrival read
	eof     bool
	pending []*LineError // malformed lines not yet reported
	seq     *int64       // the Reader's count of requests read
}

func newRequest(pool *[]*Request) *Request {
	if n := len(*pool); n > 0 {
		r := (*pool)[n-1]
		*pool = (*pool)[:n-1]
		r.reset()
		return r
	}
	r := &Request{}
	r.reset()
	return r
}

// fill reads lines until the earliest held request can be released (window
// older than the latest read, too many held, or the end); malformed lines
// are queued in pending.
func (in *input) fill(pool *[]*Request) error {
	for !in.eof {
		if len(in.held) > 0 {
			if !in.reorder || len(in.held) >= in.max || in.held[0].Time.Add(in.window).Before(in.latest) {
				return nil
			}
		}
		line, err := in.lr.next()
		if err == io.EOF {
			in.eof = true
			return nil
		}
		if err == errTooLong {
			in.pending = append(in.pending, &LineError{File: in.name, Line: in.lr.line, Err: err})
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", in.name, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		r := newRequest(pool)
		if err := in.parse(line, r); err != nil {
			*pool = append(*pool, r)
			if errors.Is(err, errHeaderLine) {
				continue
			}
			in.pending = append(in.pending, &LineError{File: in.name, Line: in.lr.line, Err: err})
			return nil
		}
		r.File, r.Line, r.src = in.name, in.lr.line, in.index
		if r.Host == "" {
			r.Host = in.host
		}
		*in.seq++
		r.seq = *in.seq
		if r.Time.After(in.latest) {
			in.latest = r.Time
		}
		heap.Push(&in.held, r)
	}
	return nil
}

// requestHeap orders requests by arrival, then by reading order.
type requestHeap []*Request

func (h requestHeap) Len() int { return len(h) }
func (h requestHeap) Less(i, j int) bool {
	if !h[i].Time.Equal(h[j].Time) {
		return h[i].Time.Before(h[j].Time)
	}
	return h[i].seq < h[j].seq
}
func (h requestHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *requestHeap) Push(x any)   { *h = append(*h, x.(*Request)) }
func (h *requestHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}

// Reader reads requests from several logs, merged by arrival time. It is
// not safe for concurrent use.
type Reader struct {
	inputs []*input
	pool   []*Request
	seq    int64
	cur    *Request
}

// Open opens the files (gzip-compressed ones too) to read them merged by
// time, each in opts.Format or the format its first line tells.
func Open(paths []string, opts InputOptions, open func(string) (io.ReadCloser, error)) (*Reader, error) {
	if opts.ReorderWindow == 0 {
		opts.ReorderWindow = DefaultReorderWindow
	}
	if opts.ReorderMax <= 0 {
		opts.ReorderMax = DefaultReorderMax
	}
	var given *Format
	var givenKind string
	if opts.Format != "" {
		var err error
		if givenKind, given, err = ParseFormat(opts.Format); err != nil {
			return nil, err
		}
	}
	rd := &Reader{}
	for i, p := range paths {
		f, err := open(p)
		if err != nil {
			rd.Close()
			return nil, err
		}
		in := &input{name: p, index: i, closer: f, window: opts.ReorderWindow, max: opts.ReorderMax, host: opts.Host, seq: &rd.seq}
		rd.inputs = append(rd.inputs, in)
		if err := in.prepare(f, givenKind, given, &opts); err != nil {
			rd.Close()
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return rd, nil
}

// prepare sets up in to read f, uncompressed, in format (of kind) or the
// one its first line tells when kind is empty.
func (in *input) prepare(f io.Reader, kind string, format *Format, opts *InputOptions) error {
	br := bufio.NewReaderSize(f, MaxLineBytes)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		br = bufio.NewReaderSize(zr, MaxLineBytes)
	}
	in.lr.r = br
	if kind == "" {
		first, err := firstLine(br)
		if err != nil {
			return err
		}
		if kind, format, err = Detect(first); err != nil {
			return err
		}
	}
	switch kind {
	case "json":
		in.parse, in.reorder = newJSONParser(), true
	case "csv":
		in.parse = newCSVParser(opts.Query)
	default:
		ps := &parser{f: format, query: opts.Query, only: headerSet(opts.Headers), resp: headerSet(opts.RespHeaders)}
		in.parse, in.reorder = ps.parse, format.hasRequestTime
	}
	return nil
}

// headerSet is the set of the canonical names of names; nil for nil (all).
func headerSet(names []string) map[string]bool {
	if names == nil {
		return nil
	}
	set := map[string]bool{}
	for _, h := range names {
		set[http.CanonicalHeaderKey(h)] = true
	}
	return set
}

// firstLine peeks at the first non-blank line without consuming it.
func firstLine(br *bufio.Reader) ([]byte, error) {
	for n := 512; ; n = min(2*n, MaxLineBytes) {
		b, err := br.Peek(n)
		for len(b) > 0 {
			line, rest, complete := bytes.Cut(b, []byte{'\n'})
			if !complete && err == nil {
				break // more to read
			}
			if len(bytes.TrimSpace(line)) > 0 {
				return line, nil
			}
			b = rest
		}
		if err != nil || n == MaxLineBytes {
			return nil, errors.New("no line to tell the log format by: empty file?")
		}
	}
}

// ParseFormat reads a --log-format value: a name of Formats, or
// nginx:FORMAT or apache:FORMAT. kind is "json", "csv" or "text" (then
// format is set).
func ParseFormat(s string) (kind string, format *Format, err error) {
	switch s {
	case "json", "csv":
		return s, nil, nil
	case "combined":
		f, err := ParseNginxFormat("combined", CombinedFormat)
		return "text", f, err
	case "main":
		f, err := ParseNginxFormat("main", MainFormat)
		return "text", f, err
	}
	if v, ok := strings.CutPrefix(s, "nginx:"); ok {
		f, err := ParseNginxFormat("nginx log_format", v)
		return "text", f, err
	}
	if v, ok := strings.CutPrefix(s, "apache:"); ok {
		f, err := ParseApacheFormat("Apache LogFormat", v)
		return "text", f, err
	}
	return "", nil, fmt.Errorf("log format %q: want %s, nginx:'LOG_FORMAT' or apache:'LOGFORMAT'", s, strings.Join(Formats, ", "))
}

// Detect tells the format of a log by its first line: JSON (portero
// serve's access log), CSV (a header line starting with time,), or
// combined (nginx and Apache; extra fields after it, as nginx's main
// adds, are ignored).
func Detect(line []byte) (kind string, format *Format, err error) {
	t := bytes.TrimSpace(line)
	switch {
	case len(t) > 0 && t[0] == '{':
		return "json", nil, nil
	case len(t) >= 5 && strings.EqualFold(string(t[:5]), "time,"):
		return "csv", nil, nil
	}
	kind, format, _ = ParseFormat("combined")
	var r Request
	r.reset()
	ps := &parser{f: format}
	if perr := ps.parse(line, &r); perr != nil {
		return "", nil, fmt.Errorf("cannot tell the log format from the first line (not JSON, not CSV with a time,… header, not combined: %v): give --log-format", perr)
	}
	return kind, format, nil
}

// Next returns the next request in arrival order, io.EOF after the last,
// or a *LineError for a line that could not be read (the next call goes
// on after it). The request is valid until the next call.
func (rd *Reader) Next() (*Request, error) {
	if rd.cur != nil {
		rd.pool = append(rd.pool, rd.cur)
		rd.cur = nil
	}
	var best *input
	for _, in := range rd.inputs {
		if err := in.fill(&rd.pool); err != nil {
			return nil, err
		}
		if len(in.pending) > 0 {
			le := in.pending[0]
			in.pending = in.pending[1:]
			return nil, le
		}
		if len(in.held) == 0 {
			continue
		}
		if best == nil || (requestHeap{in.held[0], best.held[0]}).Less(0, 1) {
			best = in
		}
	}
	if best == nil {
		return nil, io.EOF
	}
	rd.cur = heap.Pop(&best.held).(*Request)
	return rd.cur, nil
}

// Close closes the files.
func (rd *Reader) Close() error {
	var errs []error
	for _, in := range rd.inputs {
		if in.closer != nil {
			errs = append(errs, in.closer.Close())
			in.closer = nil
		}
	}
	return errors.Join(errs...)
}

var errHeaderLine = errors.New("header line")

// newJSONParser reads portero serve's JSON access log.
func newJSONParser() func([]byte, *Request) error {
	var e accesslog.Entry
	return func(line []byte, r *Request) error {
		if err := accesslog.ParseJSON(line, &e); err != nil {
			var de *accesslog.DroppedError
			if errors.As(err, &de) {
				return fmt.Errorf("%w: %w", ErrDropped, err)
			}
			return fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		r.Time, r.Method, r.Host, r.Path, r.RawQuery = e.Time, e.Method, e.Host, e.Path, e.Query
		r.Status, r.Bytes, r.ContentLength, r.APIKey, r.Latency = e.Status, e.Bytes, e.ContentLength, e.APIKey, e.Latency
		switch e.Decision {
		case "allowed", "no-rule", "":
		default:
			r.Answered = true // refused, can-never-pass, unavailable, bad-cost, forbidden, limits, error
		}
		for _, h := range e.RespHeader {
			r.setRespHeader(http.CanonicalHeaderKey(h.Name), h.Value)
		}
		r.Peer = e.Peer
		if r.Peer == "" {
			r.Peer = e.ClientIP
		}
		for _, h := range e.Header {
			r.Header[http.CanonicalHeaderKey(h.Name)] = []string{h.Value}
		}
		return nil
	}
}

// ErrDropped is wrapped by the LineError of a line where the access log
// says it dropped entries (accesslog.DroppedError).
var ErrDropped = errors.New("entries missing from the log")
