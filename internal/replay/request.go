// Package replay is `portero replay`: access logs replayed through a whole
// configuration on a virtual clock, to see what a policy would have
// refused, whom and when, before it is deployed.
//
// It reads nginx and Apache text logs (any log_format or LogFormat),
// `portero serve`'s JSON access log and CSV, merges the files by time, and
// decides every request at its arrival through a Decider: the gateway's own
// decision path. Memory does not grow with the number of lines. The text
// formats are read here: gonx, the Go library for log_format, matches a
// regular expression per line, is unmaintained and names no column.
package replay

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Request is one request read from a log.
type Request struct {
	File string
	Line int // 1-based
	// Time is when the request arrived: the logged time less the logged
	// request time (a line is written when the response ends).
	Time               time.Time
	Method, Host, Path string // Path decoded, without the query
	RawQuery           string // kept only when keys read it (InputOptions.Query)
	Peer               string // the connection's address; empty when unknown
	Header             http.Header
	// APIKey is the key's SHA-256 as serve's access log records it
	// (apikey.Logged); a text log records the key header itself.
	APIKey        string
	ContentLength int64 // -1 when the log does not say
	// Status (0 unknown), Bytes (-1 unknown) and RespHeader are the
	// response's, which settle the rules counted after the response.
	Status     int
	Bytes      int64
	RespHeader http.Header
	// Latency is how long the response took, 0 when unknown: rules counted
	// after the response are settled at Time + Latency.
	Latency time.Duration
	// Answered: Portero answered the request itself, so its response
	// settles nothing.
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
