package policy

import (
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/portero-rl/portero/internal/quote"
)

// Cost says how many units one request consumes under a rule; the zero
// value is 1.
type Cost struct {
	fixed      int64  // > 0 for a constant cost
	header     string // canonical header name, for a cost read from a header
	length     bool   // the declared Content-Length
	respHeader string // a cost from a response header (canonical)
	respBytes  bool   // a cost from the response's body bytes
}

// ErrBadCost is wrapped by Compile's errors for a malformed cost header;
// ErrLengthRequired when a rule counts body bytes of unknown length.
var (
	ErrBadCost        = errors.New("bad cost")
	ErrLengthRequired = errors.New("content length required")
)

// ParseCost reads a cost: a whole number, "header:NAME" for the number a
// request carries in header NAME (1 when absent), "content-length" for the
// body size it declares (at least 1; an unknown length is refused with
// 411), "response-header:NAME" or "response-bytes".
func ParseCost(s string) (Cost, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return Cost{}, nil
	case strings.EqualFold(s, "content-length"):
		return Cost{length: true}, nil
	case strings.EqualFold(s, "response-bytes"):
		return Cost{respBytes: true}, nil
	}
	if name, ok := strings.CutPrefix(s, "response-header:"); ok {
		name = strings.TrimSpace(name)
		if !validToken(name) {
			return Cost{}, fmt.Errorf("cost %q: want response-header:NAME with a header name", s)
		}
		return Cost{respHeader: textproto.CanonicalMIMEHeaderKey(name)}, nil
	}
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		name = strings.TrimSpace(name)
		if !validToken(name) {
			return Cost{}, fmt.Errorf("cost %q: want header:NAME with a header name", s)
		}
		return Cost{header: textproto.CanonicalMIMEHeaderKey(name)}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return Cost{}, fmt.Errorf("cost %q: want a positive whole number, header:NAME, content-length, response-header:NAME or response-bytes", s)
	}
	return Cost{fixed: n}, nil
}

// Fixed returns a constant cost of n units (n ≥ 1).
func Fixed(n int64) Cost { return Cost{fixed: n} }

// String returns the cost in the syntax ParseCost reads.
func (c Cost) String() string {
	switch {
	case c.length:
		return "content-length"
	case c.respBytes:
		return "response-bytes"
	case c.respHeader != "":
		return "response-header:" + c.respHeader
	case c.header != "":
		return "header:" + c.header
	case c.fixed > 0:
		return strconv.FormatInt(c.fixed, 10)
	}
	return "1"
}

// Unit returns the quota unit of the cost for the RateLimit-Policy field:
// "content-bytes" for content-length, "" (requests, the default) otherwise.
func (c Cost) Unit() string {
	if c.length || c.respBytes {
		return "content-bytes"
	}
	return ""
}

// FromResponse reports whether the cost is known only from the response
// (response-header:NAME, response-bytes): the rule then reserves an
// estimate when it decides (Rule.Reserve) and is settled afterwards.
func (c Cost) FromResponse() bool { return c.respBytes || c.respHeader != "" }

// ofResponse returns the cost resp reports; ok is false when it reports
// none (no such header), in which case the reservation stands.
func (c Cost) ofResponse(resp *Response) (int64, bool, error) {
	switch {
	case c.respBytes:
		return resp.Bytes, true, nil
	case c.respHeader != "":
		v := resp.Header[c.respHeader]
		if len(v) == 0 {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("%w: response header %s: %s: want a whole number", ErrBadCost, c.respHeader, quote.Input(v[0]))
		}
		return n, true, nil
	case c.fixed > 0:
		return c.fixed, true, nil
	}
	return 1, true, nil
}

// of returns the cost of req.
func (c Cost) of(req *Request) (int64, error) {
	switch {
	case c.length:
		if req.ContentLength < 0 {
			return 0, fmt.Errorf("%w: the rule counts body bytes and the request declares no Content-Length", ErrLengthRequired)
		}
		return max(req.ContentLength, 1), nil
	case c.header != "":
		v, ok := req.header(c.header)
		if !ok {
			return 1, nil
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%w: header %s: %s: want a positive whole number", ErrBadCost, c.header, quote.Input(v))
		}
		return n, nil
	case c.fixed > 0:
		return c.fixed, nil
	}
	return 1, nil
}
