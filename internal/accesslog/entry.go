// Package accesslog writes `portero serve`'s access log and reads it back:
// one line per request, in JSON (what `portero replay` reads) or in
// logfmt-style text for people, with what a replay needs to key, match,
// cost and settle every request as serve did (secrets by their SHA-256)
// and what an operator reads (route, rule, key, decision, latency).
//
// A Writer never blocks a request on the disk beyond its bounded buffer:
// an entry that finds it full is dropped and counted, and the next line
// written says how many were lost. Reopen reopens the file, for log
// rotation.
package accesslog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Header is one request header as the access log keeps it.
type Header struct {
	Name, Value string
}

// Entry is one request.
type Entry struct {
	// Time is when the request arrived; Latency the time from then to the
	// end of the response.
	Time    time.Time
	Latency time.Duration
	// Method, Host and Path are the request's method, Host header and
	// decoded URL path. Query is recorded only when the keys read it, with
	// the arguments they read alone, each value as its SHA-256.
	Method, Host, Path, Query string
	// Peer is the connection's address without the port, ClientIP the
	// client address Portero settled on (after trusted proxies).
	Peer, ClientIP string
	// Header holds the request headers the configuration reads.
	Header []Header
	// APIKey is the SHA-256 of the API key the request presented
	// (apikey.Logged), never the key.
	APIKey string
	// ContentLength is the declared body size; -1 when unknown.
	ContentLength int64
	// Status, Bytes and RespHeader are the response: its status, body
	// bytes and the header fields the costs read, to settle them.
	Status     int
	Bytes      int64
	RespHeader []Header
	// Route and Upstream name the route matched and its upstream.
	Route, Upstream string
	// Rule decided the request (the refusing one, or when allowed the one
	// closest to its limit), counting under Key.
	Rule, Key string
	// Decision is what Portero did: allowed, refused, can-never-pass,
	// unavailable (the failure policy denied), bad-cost (400 or 411),
	// no-rule, forbidden, limits or error.
	Decision string
	// Shadow lists the shadow rules that would have refused the request.
	Shadow []string
}

// Formats are the formats of a Writer.
var Formats = []string{"json", "text"}

// AppendJSON appends e as one JSON object and a newline, keys in the
// order of Entry's JSON form (time in RFC 3339, UTC, nanoseconds); empty
// strings, objects and arrays are left out, except method and path.
func AppendJSON(b []byte, e *Entry) []byte {
	b = append(b, `{"time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","method":`...)
	b = appendJSONString(b, e.Method)
	b = jsonField(b, "host", e.Host)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, e.Path)
	b = jsonField(b, "query", e.Query)
	b = jsonField(b, "peer", e.Peer)
	b = jsonField(b, "client_ip", e.ClientIP)
	b = appendJSONHeaders(b, `,"headers":{`, e.Header)
	b = jsonField(b, "api_key_sha256", e.APIKey)
	b = append(b, `,"content_length":`...)
	b = strconv.AppendInt(b, e.ContentLength, 10)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, e.Bytes, 10)
	b = appendJSONHeaders(b, `,"response_headers":{`, e.RespHeader)
	b = append(b, `,"latency_ms":`...)
	b = strconv.AppendFloat(b, float64(e.Latency)/float64(time.Millisecond), 'f', -1, 64)
	b = jsonField(b, "route", e.Route)
	b = jsonField(b, "upstream", e.Upstream)
	b = jsonField(b, "rule", e.Rule)
	b = jsonField(b, "key", e.Key)
	b = jsonField(b, "decision", e.Decision)
	if len(e.Shadow) > 0 {
		b = append(b, `,"shadow":[`...)
		for i, s := range e.Shadow {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, s)
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

// appendJSONHeaders appends hs as an object opened by open; nothing when
// hs is empty.
func appendJSONHeaders(b []byte, open string, hs []Header) []byte {
	if len(hs) == 0 {
		return b
	}
	b = append(b, open...)
	for i, h := range hs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, h.Name)
		b = append(b, ':')
		b = appendJSONString(b, h.Value)
	}
	return append(b, '}')
}

func jsonField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSONString(b, v)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes
// U+FFFD, as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendText appends e as one line of logfmt key=value pairs in the
// order of AppendJSON, values quoted when they need it.
func AppendText(b []byte, e *Entry) []byte {
	b = append(b, "time="...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = textField(b, "method", e.Method, true)
	b = textField(b, "host", e.Host, false)
	b = textField(b, "path", e.Path, true)
	b = textField(b, "query", e.Query, false)
	b = textField(b, "peer", e.Peer, false)
	b = textField(b, "client_ip", e.ClientIP, false)
	for _, h := range e.Header {
		b = textField(b, "header."+h.Name, h.Value, true)
	}
	b = textField(b, "api_key_sha256", e.APIKey, false)
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, " bytes="...)
	b = strconv.AppendInt(b, e.Bytes, 10)
	for _, h := range e.RespHeader {
		b = textField(b, "response_header."+h.Name, h.Value, true)
	}
	b = append(b, " latency_ms="...)
	b = strconv.AppendFloat(b, float64(e.Latency)/float64(time.Millisecond), 'f', 3, 64)
	b = textField(b, "route", e.Route, false)
	b = textField(b, "upstream", e.Upstream, false)
	b = textField(b, "rule", e.Rule, false)
	b = textField(b, "key", e.Key, false)
	b = textField(b, "decision", e.Decision, false)
	for _, s := range e.Shadow {
		b = textField(b, "shadow", s, false)
	}
	return append(b, '\n')
}

func textField(b []byte, name, v string, always bool) []byte {
	if v == "" && !always {
		return b
	}
	b = append(b, ' ')
	b = append(b, name...)
	b = append(b, '=')
	if v != "" && !needsQuote(v) {
		return append(b, v...)
	}
	return appendJSONString(b, v)
}

func needsQuote(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == '"' || c == '=' || c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// jsonEntry is the JSON form, for reading it back.
type jsonEntry struct {
	Time          *string           `json:"time"`
	Method        *string           `json:"method"`
	Host          string            `json:"host"`
	Path          *string           `json:"path"`
	Query         string            `json:"query"`
	Peer          string            `json:"peer"`
	ClientIP      string            `json:"client_ip"`
	Headers       map[string]string `json:"headers"`
	APIKey        string            `json:"api_key_sha256"`
	ContentLength *int64            `json:"content_length"`
	Status        int               `json:"status"`
	Bytes         int64             `json:"bytes"`
	RespHeaders   map[string]string `json:"response_headers"`
	LatencyMS     float64           `json:"latency_ms"`
	Route         string            `json:"route"`
	Upstream      string            `json:"upstream"`
	Rule          string            `json:"rule"`
	Key           string            `json:"key"`
	Decision      string            `json:"decision"`
	Shadow        []string          `json:"shadow"`
	Dropped       int64             `json:"dropped"`
}

// DroppedError is ParseJSON's error for the line a Writer writes where it
// had to drop entries: N requests are missing from the log there.
type DroppedError struct{ N int64 }

func (e *DroppedError) Error() string {
	return fmt.Sprintf("the access log dropped %d entries here (its buffer was full)", e.N)
}

// ErrMalformed is wrapped by ParseJSON's errors.
var ErrMalformed = errors.New("malformed access log line")

// ParseJSON reads one line of the JSON form back into e, reusing its
// memory. time, method and path are required; headers come back sorted by
// name. Errors wrap ErrMalformed and name the field, but for the line
// where a Writer dropped entries: a *DroppedError.
func ParseJSON(line []byte, e *Entry) error {
	line = bytes.TrimSpace(line)
	var j jsonEntry
	if err := json.Unmarshal(line, &j); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if j.Dropped > 0 && j.Method == nil {
		return &DroppedError{N: j.Dropped}
	}
	if j.Time == nil {
		return fmt.Errorf("%w: no time", ErrMalformed)
	}
	t, err := time.Parse(time.RFC3339Nano, *j.Time)
	if err != nil {
		return fmt.Errorf("%w: time %q: want RFC 3339, such as 2026-01-02T15:04:05.123Z", ErrMalformed, *j.Time)
	}
	if j.Method == nil || *j.Method == "" {
		return fmt.Errorf("%w: no method", ErrMalformed)
	}
	if j.Path == nil {
		return fmt.Errorf("%w: no path", ErrMalformed)
	}
	cl := int64(-1)
	if j.ContentLength != nil {
		cl = *j.ContentLength
	}
	hs := e.Header[:0]
	for name, v := range j.Headers {
		hs = append(hs, Header{Name: name, Value: v})
	}
	sortHeaders(hs)
	rhs := e.RespHeader[:0]
	for name, v := range j.RespHeaders {
		rhs = append(rhs, Header{Name: name, Value: v})
	}
	sortHeaders(rhs)
	*e = Entry{Time: t, Method: *j.Method, Host: j.Host, Path: *j.Path, Query: j.Query, Peer: j.Peer, ClientIP: j.ClientIP,
		Header: hs, APIKey: j.APIKey, ContentLength: cl, Status: j.Status, Bytes: j.Bytes, RespHeader: rhs,
		Latency: time.Duration(j.LatencyMS * float64(time.Millisecond)), Route: j.Route, Upstream: j.Upstream,
		Rule: j.Rule, Key: j.Key, Decision: j.Decision, Shadow: append(e.Shadow[:0], j.Shadow...)}
	return nil
}

func sortHeaders(hs []Header) {
	slices.SortFunc(hs, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
}
