package replay

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/portero-rl/portero/internal/sim"
)

// csvParser reads CSV logs: time,method,path,client_ip[,header:NAME…], one
// request a line. A first line starting with time, names the columns:
// time, method, path and client_ip (required, in any order), host,
// content_length and header:NAME, and the response's status, bytes (of
// its body) and response_header:NAME, which settle the rules counted after
// the response; without one the columns are time, method, path, client_ip.
// A path may carry its query (/search?q=x). time is RFC 3339 (sub-second digits allowed) or
// decimal seconds since the Unix epoch; requests are decided at that exact
// instant. Fields may be quoted as in RFC 4180 ("" for a quote), on one
// line.
type csvParser struct {
	cols     []csvCol
	sawFirst bool
	fields   [][]byte
	scratch  []byte
	lastTime []byte
	lastT    time.Time
	query    bool // keep the paths' query strings (InputOptions.Query)
}

type csvCol struct {
	kind   fieldKind
	header string
}

func newCSVParser(query bool) func([]byte, *Request) error {
	p := &csvParser{cols: []csvCol{{kind: fMsec}, {kind: fMethod}, {kind: fPath}, {kind: fPeer}}, query: query}
	return p.parse
}

func (p *csvParser) parse(line []byte, r *Request) error {
	fields, err := p.split(line)
	if err != nil {
		return err
	}
	if !p.sawFirst {
		p.sawFirst = true
		if len(fields) > 0 && strings.EqualFold(string(bytes.TrimSpace(fields[0])), "time") {
			return p.header(fields)
		}
	}
	if len(fields) != len(p.cols) {
		return malformed("%d fields, want %d (%s)", len(fields), len(p.cols), p.names())
	}
	var havePath bool
	for i, c := range p.cols {
		v := bytes.TrimSpace(fields[i])
		switch c.kind {
		case fMsec:
			t, err := p.time(v)
			if err != nil {
				return err
			}
			r.Time = t
		case fMethod:
			if !validMethod(v) {
				return malformed("method %q: not an HTTP method", v)
			}
			r.Method = internMethod(v)
		case fPath:
			path, q, err := decodeTarget(v, p.query)
			if err != nil {
				return err
			}
			if path == "" {
				return malformed("empty path")
			}
			r.Path, r.RawQuery, havePath = path, q, true
		case fPeer:
			r.Peer = string(v)
		case fHost:
			r.Host = string(v)
		case fContentLength:
			if len(v) > 0 {
				n, err := wholeNumber("content_length", v)
				if err != nil {
					return err
				}
				r.ContentLength = n
			}
		case fHeader:
			if len(v) > 0 {
				r.Header[c.header] = []string{string(v)}
			}
		case fStatus:
			if len(v) > 0 {
				n, err := strconv.Atoi(string(v))
				if err != nil || n < 100 || n > 599 {
					return malformed("status %q: want an HTTP status code", v)
				}
				r.Status = n
			}
		case fBytes:
			if len(v) > 0 {
				n, err := wholeNumber("bytes", v)
				if err != nil {
					return err
				}
				r.Bytes = n
			}
		case fRespHeader:
			if len(v) > 0 {
				r.setRespHeader(c.header, string(v))
			}
		}
	}
	if !havePath {
		return malformed("no path")
	}
	return nil
}

// csvColumns name the columns of a CSV log, besides header:NAME and
// response_header:NAME.
var csvColumns = []struct {
	name string
	kind fieldKind
}{{"time", fMsec}, {"method", fMethod}, {"path", fPath}, {"client_ip", fPeer}, {"host", fHost},
	{"content_length", fContentLength}, {"status", fStatus}, {"bytes", fBytes}}

// name is the column's name in a header line.
func (c csvCol) name() string {
	switch c.kind {
	case fHeader:
		return "header:" + c.header
	case fRespHeader:
		return "response_header:" + c.header
	}
	for _, col := range csvColumns {
		if col.kind == c.kind {
			return col.name
		}
	}
	return ""
}

func (p *csvParser) names() string {
	s := make([]string, len(p.cols))
	for i, c := range p.cols {
		s[i] = c.name()
	}
	return strings.Join(s, ",")
}

func (p *csvParser) header(fields [][]byte) error {
	p.cols = p.cols[:0]
	seen := map[string]bool{}
	for _, f := range fields {
		name := strings.TrimSpace(string(f))
		lower := strings.ToLower(name)
		c := csvCol{kind: fSkip}
		for _, col := range csvColumns {
			if lower == col.name {
				c.kind = col.kind
			}
		}
		for _, h := range []struct {
			prefix string
			kind   fieldKind
		}{{"header:", fHeader}, {"response_header:", fRespHeader}} {
			if strings.HasPrefix(lower, h.prefix) && len(name) > len(h.prefix) {
				c = csvCol{kind: h.kind, header: http.CanonicalHeaderKey(strings.TrimSpace(name[len(h.prefix):]))}
				lower = h.prefix + strings.ToLower(c.header)
			}
		}
		if c.kind == fSkip {
			return malformed("column %q: want time, method, path, client_ip, host, content_length, header:NAME, status, bytes or response_header:NAME", name)
		}
		if seen[lower] {
			return malformed("column %q given twice", name)
		}
		seen[lower] = true
		p.cols = append(p.cols, c)
	}
	for _, need := range []string{"time", "method", "path", "client_ip"} {
		if !seen[need] {
			return malformed("header line has no %s column", need)
		}
	}
	return errHeaderLine
}

// split splits one CSV line into fields (quoted fields unquoted into
// scratch).
func (p *csvParser) split(line []byte) ([][]byte, error) {
	line = bytes.TrimRight(line, "\r")
	p.fields = p.fields[:0]
	p.scratch = p.scratch[:0]
	for {
		if len(line) > 0 && line[0] == '"' {
			start := len(p.scratch)
			i := 1
			for {
				if i >= len(line) {
					return nil, malformed("quoted field without its closing quote")
				}
				if line[i] == '"' {
					if i+1 < len(line) && line[i+1] == '"' {
						p.scratch = append(p.scratch, '"')
						i += 2
						continue
					}
					break
				}
				p.scratch = append(p.scratch, line[i])
				i++
			}
			p.fields = append(p.fields, p.scratch[start:len(p.scratch):len(p.scratch)])
			line = line[i+1:]
			if len(line) == 0 {
				return p.fields, nil
			}
			if line[0] != ',' {
				return nil, malformed("text after a quoted field")
			}
			line = line[1:]
			continue
		}
		i := bytes.IndexByte(line, ',')
		if i < 0 {
			return append(p.fields, line), nil
		}
		p.fields = append(p.fields, line[:i])
		line = line[i+1:]
	}
}

// time reads RFC 3339 or decimal seconds since the epoch.
func (p *csvParser) time(v []byte) (time.Time, error) {
	if bytes.Equal(v, p.lastTime) && !p.lastT.IsZero() {
		return p.lastT, nil
	}
	var t time.Time
	if d, err := sim.ParseSeconds(v); err == nil {
		t = time.Unix(0, 0).Add(d)
	} else if t, err = time.Parse(time.RFC3339Nano, string(v)); err != nil {
		return time.Time{}, malformed("time %q: want RFC 3339 (2006-01-02T15:04:05.5Z) or seconds since the epoch", v)
	}
	p.lastTime = append(p.lastTime[:0], v...)
	p.lastT = t
	return t, nil
}
