package replay

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/portero-rl/portero/internal/sim"
)

// A Format says how to read the lines of a text log: a list of literals
// and fields, compiled from an nginx log_format (ParseNginxFormat) or an
// Apache LogFormat (ParseApacheFormat). A field's value runs to the next
// literal; "-" is an empty value.
type Format struct {
	name   string
	tokens []token
	hasMsec, hasTime, hasRequestTime,
	hasRequest, hasMethod, hasPath bool
}

type fieldKind uint8

const (
	fLiteral fieldKind = iota
	fSkip
	fPeer
	fTimeLocal   // 10/Oct/2000:13:55:36 -0700
	fTimeISO     // 2000-10-10T13:55:36-07:00
	fMsec        // 1700000000.123, seconds since the epoch
	fRequestTime // seconds, such as 0.123
	fRequestTimeMicros
	fRequest // GET /path?q HTTP/1.1
	fMethod
	fURI  // raw target with query ($request_uri)
	fPath // decoded path ($uri, Apache's %U)
	fHost
	fStatus
	fHeader
	fContentLength
	fBytes      // the response's body bytes ($body_bytes_sent, %B, %b)
	fRespHeader // a response header ($sent_http_NAME, $upstream_http_NAME, %{NAME}o)
)

type token struct {
	kind fieldKind
	lit  string // the literal, or the header name of fHeader and fRespHeader
	litb []byte // lit, for the byte searches
}

// The named formats: nginx's and Apache's combined (the same line), and
// nginx's default main, which adds X-Forwarded-For.
const (
	CombinedFormat = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"`
	MainFormat     = CombinedFormat + ` "$http_x_forwarded_for"`
)

// nginxVariables are the nginx variables a Format reads, besides
// $http_NAME, $sent_http_NAME and $upstream_http_NAME.
var nginxVariables = map[string]fieldKind{
	"remote_addr": fPeer, "time_local": fTimeLocal, "time_iso8601": fTimeISO, "msec": fMsec,
	"request_time": fRequestTime, "request": fRequest, "request_method": fMethod, "request_uri": fURI,
	"uri": fPath, "document_uri": fPath, "host": fHost, "http_host": fHost, "status": fStatus,
	"content_length": fContentLength, "http_content_length": fContentLength, "body_bytes_sent": fBytes,
}

// ParseNginxFormat compiles an nginx log_format string, such as
// `$remote_addr [$time_local] "$request" $status $request_time
// "$http_x_api_key"`. It reads $remote_addr (the peer), $time_local,
// $time_iso8601, $msec, $request_time, $request, $request_method,
// $request_uri, $uri, $host and $http_host, $status, $content_length,
// $http_NAME (the request header NAME, underscores read as dashes),
// $body_bytes_sent and $sent_http_NAME or $upstream_http_NAME (the
// response's body bytes and header NAME, which settle the rules counted
// after the response); every other variable is skipped. The format needs a
// time ($msec, $time_local or $time_iso8601) and a request ($request, or
// $request_method with $request_uri or $uri).
func ParseNginxFormat(name, s string) (*Format, error) {
	b := formatBuilder{f: &Format{name: name}, src: s}
	for i := 0; i < len(s); {
		if s[i] != '$' {
			b.lit.WriteByte(s[i])
			i++
			continue
		}
		var v string
		if i+1 < len(s) && s[i+1] == '{' {
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("log format %q: ${ without }", s)
			}
			v, i = s[i+2:i+end], i+end+1
		} else {
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			v, i = s[i+1:j], j
		}
		if v == "" {
			return nil, fmt.Errorf("log format %q: $ without a variable name", s)
		}
		if err := b.field(nginxToken(strings.ToLower(v))); err != nil {
			return nil, err
		}
	}
	return b.done()
}

func nginxToken(v string) token {
	if k, ok := nginxVariables[v]; ok {
		return token{kind: k}
	}
	for _, prefix := range []string{"sent_http_", "upstream_http_"} {
		if h, ok := strings.CutPrefix(v, prefix); ok && h != "" {
			return token{kind: fRespHeader, lit: http.CanonicalHeaderKey(strings.ReplaceAll(h, "_", "-"))}
		}
	}
	if h, ok := strings.CutPrefix(v, "http_"); ok && h != "" {
		return token{kind: fHeader, lit: http.CanonicalHeaderKey(strings.ReplaceAll(h, "_", "-"))}
	}
	return token{kind: fSkip}
}

// apacheDirectives are the Apache LogFormat directives a Format reads
// without an argument, besides %t and %T.
var apacheDirectives = map[byte]fieldKind{
	'h': fPeer, 'a': fPeer, 'r': fRequest, 'm': fMethod, 'U': fPath, 's': fStatus,
	'D': fRequestTimeMicros, 'v': fHost, 'V': fHost, 'b': fBytes, 'B': fBytes,
}

// ParseApacheFormat compiles an Apache LogFormat string, such as
// `%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i" %D`. It reads %h
// and %a (the peer), %t (the time in brackets), %r, %m, %U (the path), %>s
// and %s, %D (microseconds) and %T (seconds) of request time, %v and %V
// (the host), %{NAME}i (the request header NAME), %b and %B (the
// response's body bytes) and %{NAME}o (the response header NAME); the
// others are skipped.
func ParseApacheFormat(name, s string) (*Format, error) {
	b := formatBuilder{f: &Format{name: name}, src: s}
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.lit.WriteByte(s[i])
			continue
		}
		i++
		if i < len(s) && s[i] == '%' {
			b.lit.WriteByte('%')
			continue
		}
		var arg string
		if i < len(s) && s[i] == '{' {
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("log format %q: %%{ without }", s)
			}
			arg, i = s[i+1:i+end], i+end+1
		}
		for i < len(s) && (s[i] == '>' || s[i] == '<' || s[i] == '!' || s[i] >= '0' && s[i] <= '9' || s[i] == ',') {
			i++ // modifiers: %>s, %400,501{…}i
		}
		if i >= len(s) {
			return nil, fmt.Errorf("log format %q: %% at the end", s)
		}
		t := token{kind: fSkip}
		switch c := s[i]; {
		case c == 't' && arg == "": // [10/Oct/2000:13:55:36 -0700]
			b.lit.WriteByte('[')
			t.kind = fTimeLocal
		case c == 'T' && (arg == "" || arg == "s"):
			t.kind = fRequestTime
		case c == 'o':
			t = token{kind: fRespHeader, lit: http.CanonicalHeaderKey(arg)}
		case c == 'i':
			t = token{kind: fHeader, lit: http.CanonicalHeaderKey(arg)}
			switch t.lit {
			case "Host":
				t = token{kind: fHost}
			case "Content-Length":
				t = token{kind: fContentLength}
			}
		case c != 't' && c != 'T':
			if k, ok := apacheDirectives[c]; ok {
				t.kind = k
			}
		}
		if err := b.field(t); err != nil {
			return nil, err
		}
		if t.kind == fTimeLocal {
			b.lit.WriteByte(']')
		}
	}
	return b.done()
}

// formatBuilder compiles the tokens of a Format from its source, src.
type formatBuilder struct {
	f   *Format
	src string
	lit strings.Builder // the literal being read
}

// field ends the literal before it and adds t.
func (b *formatBuilder) field(t token) error {
	b.flush()
	f := b.f
	if n := len(f.tokens); n > 0 && f.tokens[n-1].kind != fLiteral {
		return fmt.Errorf("log format %q: two fields with nothing between them: the first would not know where it ends", b.src)
	}
	switch t.kind {
	case fMsec:
		f.hasMsec = true
	case fTimeLocal, fTimeISO:
		f.hasTime = true
	case fRequestTime, fRequestTimeMicros:
		f.hasRequestTime = true
	case fRequest:
		f.hasRequest = true
	case fMethod:
		f.hasMethod = true
	case fURI, fPath:
		f.hasPath = true
	}
	f.tokens = append(f.tokens, t)
	return nil
}

func (b *formatBuilder) flush() {
	if b.lit.Len() > 0 {
		l := b.lit.String()
		b.f.tokens = append(b.f.tokens, token{kind: fLiteral, lit: l, litb: []byte(l)})
		b.lit.Reset()
	}
}

// done checks that the format has what a request needs.
func (b *formatBuilder) done() (*Format, error) {
	b.flush()
	f := b.f
	if !f.hasMsec && !f.hasTime {
		return nil, fmt.Errorf("log format %q: no time ($msec, $time_local or $time_iso8601)", b.src)
	}
	if !f.hasRequest && !(f.hasMethod && f.hasPath) {
		return nil, fmt.Errorf("log format %q: no request ($request, or $request_method and $request_uri)", b.src)
	}
	return f, nil
}

// parser reads the lines of one text log in one Format; it keeps the last
// timestamp it read, since a busy log repeats each second many times.
type parser struct {
	f     *Format
	only  map[string]bool // when not nil, the only request headers to record
	query bool            // keep the query strings
	resp  map[string]bool // when not nil, the only response headers to record

	lastTime []byte // the last time field, and lastT what it says
	lastT    time.Time
	zones    map[int]*time.Location
	scratch  []byte
}

// lineFields are the fields of a line that make its request once the whole
// line is read.
type lineFields struct {
	logged               time.Time // when the line was written
	haveMsec             bool      // logged has $msec's precision
	rt                   time.Duration
	method, target, path []byte
}

// parse reads line into r (reset by the caller). Errors wrap ErrMalformed.
func (p *parser) parse(line []byte, r *Request) error {
	line = bytes.TrimRight(line, "\r\n")
	var lf lineFields
	pos := 0
	toks := p.f.tokens
	for i, t := range toks {
		if t.kind == fLiteral {
			if !bytes.HasPrefix(line[pos:], t.litb) {
				return malformed("want %q at column %d of the %s format", t.lit, pos+1, p.f.name)
			}
			pos += len(t.lit)
			continue
		}
		end := len(line)
		if i+1 < len(toks) {
			e := findLiteral(line[pos:], toks[i+1].litb)
			if e < 0 {
				return malformed("want %q after column %d of the %s format", toks[i+1].lit, pos+1, p.f.name)
			}
			end = pos + e
		}
		v := line[pos:end]
		pos = end
		if len(v) == 1 && v[0] == '-' {
			v = nil
		}
		if err := p.field(t, v, r, &lf); err != nil {
			return err
		}
	}
	return p.request(&lf, r)
}

// field reads the value v of field t (nil for none, "-") into r or lf.
func (p *parser) field(t token, v []byte, r *Request, lf *lineFields) error {
	switch t.kind {
	case fPeer:
		r.Peer = string(v)
	case fTimeLocal, fTimeISO:
		if lf.haveMsec {
			return nil
		}
		tm, err := p.time(t.kind, v)
		if err != nil {
			return err
		}
		lf.logged = tm
	case fMsec:
		s, err := sim.ParseSeconds(v)
		if err != nil {
			return malformed("msec %q: %v", v, err)
		}
		lf.logged, lf.haveMsec = time.Unix(0, 0).Add(s), true
	case fRequestTime:
		d, err := sim.ParseSeconds(v)
		if err != nil && v != nil {
			return malformed("request time %q: %v", v, err)
		}
		lf.rt = d
	case fRequestTimeMicros:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if (err != nil || n < 0) && v != nil {
			return malformed("request time %q: want microseconds", v)
		}
		lf.rt = time.Duration(n) * time.Microsecond
	case fRequest:
		var ok bool
		if lf.method, lf.target, ok = splitRequest(v); !ok {
			return malformed("request %q: want METHOD TARGET PROTOCOL", v)
		}
	case fMethod:
		lf.method = v
	case fURI:
		lf.target = v
	case fPath:
		lf.path = v
	case fHost:
		r.Host = string(unescape(v, &p.scratch))
	case fStatus:
		r.Status, _ = strconv.Atoi(string(v))
	case fContentLength:
		if v != nil {
			n, err := wholeNumber("content length", v)
			if err != nil {
				return err
			}
			r.ContentLength = n
		}
	case fHeader:
		if v != nil && (p.only == nil || p.only[t.lit]) {
			r.Header[t.lit] = []string{string(unescape(v, &p.scratch))}
		}
	case fBytes:
		r.Bytes = 0 // Apache's %b writes - for none
		if v != nil {
			n, err := wholeNumber("body bytes", v)
			if err != nil {
				return err
			}
			r.Bytes = n
		}
	case fRespHeader:
		if v != nil && (p.resp == nil || p.resp[t.lit]) {
			r.setRespHeader(t.lit, string(unescape(v, &p.scratch)))
		}
	}
	return nil
}

// request completes r from the line's time and request fields.
func (p *parser) request(lf *lineFields, r *Request) error {
	if lf.logged.IsZero() {
		return malformed("no time")
	}
	if !validMethod(lf.method) {
		return malformed("method %q: not an HTTP method", lf.method)
	}
	r.Method = internMethod(lf.method)
	switch {
	case lf.target != nil:
		u, q, err := decodeTarget(unescape(lf.target, &p.scratch), p.query)
		if err != nil {
			return err
		}
		r.Path, r.RawQuery = u, q
	case lf.path != nil:
		r.Path = string(unescape(lf.path, &p.scratch))
	default:
		return malformed("no path")
	}
	// The line is written when the response ends: the request arrived
	// request_time earlier (whole seconds of it, without $msec).
	if !lf.haveMsec {
		lf.rt = lf.rt.Truncate(time.Second)
	}
	r.Time, r.Latency = lf.logged.Add(-lf.rt), lf.rt
	return nil
}

// parseCount reads a whole number without allocating a string.
func parseCount(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// wholeNumber reads field name with parseCount, or says it is no number.
func wholeNumber(name string, v []byte) (int64, error) {
	n, ok := parseCount(v)
	if !ok {
		return 0, malformed("%s %q: want a whole number", name, v)
	}
	return n, nil
}

// findLiteral returns the index of lit in b, skipping occurrences escaped
// by a backslash (Apache's \" in quoted fields), or -1.
func findLiteral(b, lit []byte) int {
	for off := 0; ; {
		i := bytes.IndexByte(b[off:], lit[0])
		if i < 0 {
			return -1
		}
		i += off
		if !bytes.HasPrefix(b[i:], lit) {
			off = i + 1
			continue
		}
		n := 0
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			n++
		}
		if n%2 == 0 {
			return i
		}
		off = i + 1
	}
}

// unescape undoes the escapes of nginx (\xHH) and Apache (\" \\ \xHH),
// in scratch when there are any.
func unescape(v []byte, scratch *[]byte) []byte {
	if bytes.IndexByte(v, '\\') < 0 {
		return v
	}
	out := (*scratch)[:0]
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '\\' || i+1 >= len(v) {
			out = append(out, c)
			continue
		}
		switch n := v[i+1]; {
		case n == 'x' && i+3 < len(v) && isHex(v[i+2]) && isHex(v[i+3]):
			out = append(out, unhex(v[i+2])<<4|unhex(v[i+3]))
			i += 3
		case n == '"' || n == '\\':
			out = append(out, n)
			i++
		default:
			out = append(out, c)
		}
	}
	*scratch = out
	return out
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// splitRequest splits a request line: METHOD TARGET PROTOCOL (HTTP/0.9's
// METHOD TARGET too).
func splitRequest(v []byte) (method, target []byte, ok bool) {
	i := bytes.IndexByte(v, ' ')
	if i <= 0 {
		return nil, nil, false
	}
	method, rest := v[:i], v[i+1:]
	if j := bytes.LastIndexByte(rest, ' '); j >= 0 && bytes.HasPrefix(rest[j+1:], []byte("HTTP/")) {
		rest = rest[:j]
	}
	if len(rest) == 0 {
		return nil, nil, false
	}
	return method, rest, true
}

func validMethod(m []byte) bool {
	if len(m) == 0 || len(m) > 32 {
		return false
	}
	for _, c := range m {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead,
	http.MethodOptions, http.MethodPatch, http.MethodConnect, http.MethodTrace}

// internMethod returns the method as a string, without allocating for the
// common ones.
func internMethod(m []byte) string {
	for _, s := range methods {
		if string(m) == s {
			return s
		}
	}
	return string(m)
}

// decodeTarget returns the decoded path of a request target as net/http
// sets URL.Path and, when query is set, its raw query.
func decodeTarget(t []byte, query bool) (path, rawQuery string, err error) {
	if len(t) > 0 && t[0] == '/' && !bytes.ContainsAny(t, "%?#") {
		return string(t), "", nil // the common case: nothing to decode
	}
	u, err := url.ParseRequestURI(string(t))
	if err != nil {
		return "", "", malformed("request target %q: %v", t, err)
	}
	if query {
		rawQuery = u.RawQuery
	}
	return u.Path, rawQuery, nil
}

var months = map[string]time.Month{"Jan": 1, "Feb": 2, "Mar": 3, "Apr": 4, "May": 5, "Jun": 6, "Jul": 7, "Aug": 8,
	"Sep": 9, "Oct": 10, "Nov": 11, "Dec": 12}

// time reads a time field, from the cache when it repeats the last one.
func (p *parser) time(kind fieldKind, v []byte) (time.Time, error) {
	if bytes.Equal(v, p.lastTime) && !p.lastT.IsZero() {
		return p.lastT, nil
	}
	var t time.Time
	var err error
	if kind == fTimeISO {
		t, err = time.Parse(time.RFC3339, string(v))
		if err != nil {
			return time.Time{}, malformed("time %q: want 2006-01-02T15:04:05-07:00", v)
		}
	} else if t, err = p.timeLocal(v); err != nil {
		return time.Time{}, err
	}
	p.lastTime = append(p.lastTime[:0], v...)
	p.lastT = t
	return t, nil
}

// timeLocal reads 02/Jan/2006:15:04:05 -0700, faster than time.Parse.
func (p *parser) timeLocal(v []byte) (time.Time, error) {
	bad := func() (time.Time, error) {
		return time.Time{}, malformed("time %q: want 02/Jan/2006:15:04:05 -0700", v)
	}
	if len(v) != 26 || v[2] != '/' || v[6] != '/' || v[11] != ':' || v[14] != ':' || v[17] != ':' || v[20] != ' ' {
		return bad()
	}
	num := func(b []byte) int {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	day, year, hh, mm, ss := num(v[0:2]), num(v[7:11]), num(v[12:14]), num(v[15:17]), num(v[18:20])
	mon, ok := months[string(v[3:6])]
	zh, zm := num(v[22:24]), num(v[24:26])
	if !ok || day < 1 || day > 31 || year < 0 || hh < 0 || hh > 23 || mm < 0 || mm > 59 || ss < 0 || ss > 60 || zh < 0 || zm < 0 ||
		(v[21] != '+' && v[21] != '-') {
		return bad()
	}
	off := (zh*60 + zm) * 60
	if v[21] == '-' {
		off = -off
	}
	loc := p.zones[off]
	if loc == nil {
		if p.zones == nil {
			p.zones = map[int]*time.Location{}
		}
		if len(p.zones) > 64 {
			clear(p.zones) // bounded whatever the file holds
		}
		loc = time.FixedZone("", off)
		p.zones[off] = loc
	}
	t := time.Date(year, mon, day, hh, mm, ss, 0, loc)
	if t.Day() != day {
		return bad() // 31/Feb
	}
	return t, nil
}
