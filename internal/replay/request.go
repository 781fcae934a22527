// Package replay is `portero replay`: real traffic from access logs
// replayed through a whole Portero configuration on a virtual clock, to see
// what a policy would have done before it is deployed.
//
// It reads nginx and Apache logs (the combined format, nginx's main, or any
// nginx log_format), the JSON access log of `portero serve`
// (internal/accesslog) and CSV; merges the files by time; decides every
// request at its arrival through a Decider (the gateway's own decision
// path, so that every rule, key, match, cost, shadow mode and quota is
// decided exactly as `portero serve` decides it); and reports, per rule,
// what it would have refused, whom, and when. It streams: memory does not
// grow with the number of lines (see Replay).
//
// The text formats are compiled and read here: the Go library for nginx's
// log_format (github.com/satyrius/gonx, unmaintained since 2018) matches a
// regular expression per line, about four times slower than this reader,
// and its errors name no column.
package replay

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Request is one request read from a log.
type Request struct {
	// File and Line say where it was read (Line is 1-based).
	File string
	Line int
	// Time is when the request arrived: the logged time, less the logged
	// request time when the log has one (a log line is written when the
	// response ends).
	Time time.Time
	// Method, Host and Path (decoded, without the query) of the request.
	Method, Host, Path string
	// RawQuery is the query string without the "?", kept only when the
	// configuration's keys read it (InputOptions.Query).
	RawQuery string
	// Peer is the address of the connection (nginx's $remote_addr, the
	// access log's peer), without a port; empty when unknown.
	Peer string
	// Header holds the headers the log recorded, under canonical names.
	Header http.Header
	// APIKey is the API key as serve's access log records it (its
	// SHA-256, apikey.Logged), never the key; empty when the log does not
	// say (a text log records the key header itself, in Header).
	APIKey string
	// ContentLength is the declared body size; -1 when the log does not
	// say.
	ContentLength int64
	// Status is the response's status as the log recorded it, 0 when it
	// does not; Bytes the response's body bytes, -1 when it does not; and
	// RespHeader the response's header fields it recorded (nginx's
	// $sent_http_NAME and $upstream_http_NAME, Apache's %{NAME}o, the
	// access log's response_headers). They settle the rules counted after
	// the response (count_responses, a cost from the response).
	Status     int
	Bytes      int64
	RespHeader http.Header
	// Latency is how long the response took (serve's latency_ms, nginx's
	// $request_time — whole seconds of it without $msec —, Apache's %D or
	// %T), 0 when the log does not say: its rules counted after the
	// response are settled at Time + Latency, when serve settled them.
	Latency time.Duration
	// Answered: the log says Portero answered the request itself (serve's
	// access log: refused, forbidden…), so its response is not the
	// upstream's and settles nothing.
	Answered bool

	seq int64 // order of reading, to keep file order among equal times
	src int   // index of the input it came from
}

// reset empties r for reuse, keeping its header maps.
func (r *Request) reset() {
	h, rh := r.Header, r.RespHeader
	clear(h)
	clear(rh)
	*r = Request{Header: h, RespHeader: rh, ContentLength: -1, Bytes: -1}
	if r.Header == nil {
		r.Header = http.Header{}
	}
}

// setRespHeader records a response header field, making the map the first
// time one is needed.
func (r *Request) setRespHeader(name, value string) {
	if r.RespHeader == nil {
		r.RespHeader = http.Header{}
	}
	r.RespHeader[name] = []string{value}
}

// ErrMalformed is wrapped by the errors of lines that cannot be read.
var ErrMalformed = errors.New("malformed line")

// LineError is a line that could not be read: it is counted, reported and
// skipped.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}
