package replay

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func parseWith(t *testing.T, format, line string) (*Request, error) {
	t.Helper()
	_, f, err := ParseFormat(format)
	if err != nil {
		t.Fatal(err)
	}
	p := &parser{f: f}
	r := &Request{}
	r.reset()
	return r, p.parse([]byte(line), r)
}

func TestParseLine(t *testing.T) {
	madrid := time.FixedZone("", 2*3600)
	for _, c := range []struct {
		format, line string
		want         Request
	}{
		{"combined", `203.0.113.7 - frank [10/Oct/2025:13:55:36 +0200] "GET /api/items?id=1 HTTP/1.1" 200 2326 "http://example.com/" "curl/8.0"`,
			Request{Peer: "203.0.113.7", Time: time.Date(2025, 10, 10, 13, 55, 36, 0, madrid), Method: "GET", Path: "/api/items", Status: 200,
				Header: map[string][]string{"Referer": {"http://example.com/"}, "User-Agent": {"curl/8.0"}}}},
		// main: X-Forwarded-For; an escaped quote and a percent-encoded path.
		{"main", `10.0.0.2 - - [10/Oct/2025:13:55:36 +0000] "POST /a%20b/\x22c HTTP/2.0" 429 0 "-" "x" "198.51.100.1, 10.0.0.9"`,
			Request{Peer: "10.0.0.2", Time: time.Date(2025, 10, 10, 13, 55, 36, 0, time.UTC), Method: "POST", Path: `/a b/"c`, Status: 429,
				Header: map[string][]string{"X-Forwarded-For": {"198.51.100.1, 10.0.0.9"}, "User-Agent": {"x"}}}},
		// $msec and $request_time: arrival = msec - request_time, exactly.
		{`nginx:$remote_addr [$time_local] "$request" $status $msec $request_time "$http_x_api_key" $host`,
			`192.0.2.1 [10/Oct/2025:13:55:36 +0000] "GET http://api.example.com/v1/x HTTP/1.1" 200 1760104536.250 0.300 "key-1" api.example.com`,
			Request{Peer: "192.0.2.1", Time: time.Unix(1760104535, 950_000_000), Method: "GET", Path: "/v1/x", Status: 200, Host: "api.example.com",
				Header: map[string][]string{"X-Api-Key": {"key-1"}}}},
		// Whole seconds only: decided at the second the request arrived in.
		{`nginx:$remote_addr [$time_local] "$request" $request_time`,
			`192.0.2.1 [10/Oct/2025:13:55:36 +0000] "GET / HTTP/1.1" 2.750`,
			Request{Peer: "192.0.2.1", Time: time.Date(2025, 10, 10, 13, 55, 34, 0, time.UTC), Method: "GET", Path: "/"}},
		// Apache: %t in brackets, \" inside a quoted field, %D in microseconds.
		{`apache:%h %l %u %t "%r" %>s %b "%{Referer}i" "%{X-API-Key}i" %D`,
			`198.51.100.5 - - [01/Jan/2026:00:00:01 +0000] "GET /q HTTP/1.1" 200 5 "-" "k\"1" 1500000`,
			Request{Peer: "198.51.100.5", Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Method: "GET", Path: "/q", Status: 200,
				Header: map[string][]string{"X-Api-Key": {`k"1`}}}},
		{`nginx:$time_iso8601 $request_method $uri $content_length`, `2026-01-01T00:00:01+01:00 PUT /up 1024`,
			Request{Time: time.Date(2026, 1, 1, 0, 0, 1, 0, time.FixedZone("", 3600)), Method: "PUT", Path: "/up", ContentLength: 1024}},
	} {
		r, err := parseWith(t, c.format, c.line)
		if err != nil {
			t.Errorf("%s: parse(%s): %v", c.format, c.line, err)
			continue
		}
		if c.want.Header == nil {
			c.want.Header = map[string][]string{}
		}
		if c.want.ContentLength == 0 {
			c.want.ContentLength = -1
		}
		if !r.Time.Equal(c.want.Time) || r.Peer != c.want.Peer || r.Method != c.want.Method || r.Path != c.want.Path ||
			r.Status != c.want.Status || r.Host != c.want.Host || r.ContentLength != c.want.ContentLength ||
			len(r.Header) != len(c.want.Header) {
			t.Errorf("%s: parse(%s) = %+v, want %+v", c.format, c.line, *r, c.want)
			continue
		}
		for k, v := range c.want.Header {
			if got := r.Header[k]; len(got) != 1 || got[0] != v[0] {
				t.Errorf("%s: header %s = %q, want %q", c.format, k, got, v)
			}
		}
	}
}

func TestParseLineErrors(t *testing.T) {
	for _, line := range []string{
		``,
		`203.0.113.7 - - [10/Oct/2025:13:55:36 +0200] "\x16\x03\x01" 400 0 "-" "-"`, // TLS bytes on a plain port
		`203.0.113.7 - - [31/Feb/2025:13:55:36 +0200] "GET / HTTP/1.1" 200 0 "-" "-"`,
		`203.0.113.7 - - [10/Foo/2025:13:55:36 +0200] "GET / HTTP/1.1" 200 0 "-" "-"`,
		`203.0.113.7 - - [10/Oct/2025:13:55:36] "GET / HTTP/1.1" 200 0 "-" "-"`,
		`203.0.113.7 - - [10/Oct/2025:13:55:36 +0200] "GET HTTP/1.1" 200 0 "-" "-"`,
		`203.0.113.7 - - [10/Oct/2025:13:55:36 +0200] "GET %zz HTTP/1.1" 200 0 "-" "-"`,
		`just some text`,
	} {
		if r, err := parseWith(t, "combined", line); err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("parse(%q) = %+v, %v; want a malformed-line error", line, r, err)
		}
	}
}

func TestFormatErrors(t *testing.T) {
	for _, f := range []string{"xml", "nginx:$remote_addr $status", `nginx:$msec$request`, "nginx:${msec", `nginx:$msec "$request_method"`, "apache:%h %"} {
		if _, _, err := ParseFormat(f); err == nil {
			t.Errorf("ParseFormat(%q): no error", f)
		}
	}
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func openFile(p string) (io.ReadCloser, error) { return os.Open(p) }

func readAll(t *testing.T, paths []string, o InputOptions) (reqs []Request, errs []string) {
	t.Helper()
	rd, err := Open(paths, o, openFile)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for {
		r, err := rd.Next()
		if err == io.EOF {
			return reqs, errs
		}
		var le *LineError
		if errors.As(err, &le) {
			errs = append(errs, le.Error())
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		c := *r
		c.Header = r.Header.Clone() // r's map is reused
		reqs = append(reqs, c)
	}
}

func TestCSV(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "a.csv", "time,method,path,client_ip,header:X-API-Key\n"+
		"2026-01-01T00:00:00.5Z,GET,/a,192.0.2.1,k1\n"+
		"1767225600.75,POST,\"/b,c\",192.0.2.2,\n"+
		"2026-01-01T00:00:01Z,GET,/a,192.0.2.1\n"+ // a field short
		"yesterday,GET,/a,192.0.2.1,k\n")
	reqs, errs := readAll(t, []string{p}, InputOptions{})
	if len(reqs) != 2 || len(errs) != 2 {
		t.Fatalf("read %d requests and %v, want 2 and 2 errors", len(reqs), errs)
	}
	if !reqs[0].Time.Equal(time.Date(2026, 1, 1, 0, 0, 0, 5e8, time.UTC)) || reqs[0].Header.Get("X-Api-Key") != "k1" || reqs[0].Peer != "192.0.2.1" {
		t.Errorf("row 1 = %+v", reqs[0])
	}
	if !reqs[1].Time.Equal(time.Date(2026, 1, 1, 0, 0, 0, 75e7, time.UTC)) || reqs[1].Path != "/b,c" || len(reqs[1].Header) != 0 {
		t.Errorf("row 2 = %+v", reqs[1])
	}
	if !strings.HasPrefix(errs[0], p+":4: ") || !strings.HasPrefix(errs[1], p+":5: ") {
		t.Errorf("errors %q: want lines 4 and 5", errs)
	}
	// Without a header line (--log-format csv): the four columns.
	p = write(t, dir, "b.csv", "1767225600,GET,/x,192.0.2.9\n")
	reqs, errs = readAll(t, []string{p}, InputOptions{Format: "csv"})
	if len(reqs) != 1 || len(errs) != 0 || reqs[0].Path != "/x" {
		t.Errorf("headerless CSV: %+v %v", reqs, errs)
	}
}

// Lines written when their responses end come back in arrival order, ties
// in file order; one later than the window is passed on as it comes.
func TestReorder(t *testing.T) {
	dir := t.TempDir()
	format := `nginx:$remote_addr $msec $request_time "$request"`
	p := write(t, dir, "a.log", strings.Join([]string{
		`192.0.2.1 100.500 0.500 "GET /1 HTTP/1.1"`, // arrived at 100.0
		`192.0.2.2 100.600 0.700 "GET /2 HTTP/1.1"`, // 99.9
		`192.0.2.3 100.700 0.700 "GET /3 HTTP/1.1"`, // 100.0, after /1 in the file
		`192.0.2.4 130.000 0.000 "GET /4 HTTP/1.1"`,
		`192.0.2.6 145.000 0.000 "GET /6 HTTP/1.1"`,  // /4 is 15 s behind: released
		`192.0.2.5 146.000 35.000 "GET /5 HTTP/1.1"`, // 111: too late to come before /4
	}, "\n")+"\n")
	reqs, errs := readAll(t, []string{p}, InputOptions{Format: format})
	var got []string
	for _, r := range reqs {
		got = append(got, r.Path)
	}
	if strings.Join(got, " ") != "/2 /1 /3 /4 /5 /6" || len(errs) != 0 {
		t.Errorf("order %v (errors %v), want /2 /1 /3 /4 /5 /6", got, errs)
	}
}

// Several files are merged by time (ties in the order of the files), a
// gzip-compressed one included; each file's format is detected.
func TestMerge(t *testing.T) {
	dir := t.TempDir()
	a := write(t, dir, "a.log", `192.0.2.1 - - [01/Jan/2026:00:00:00 +0000] "GET /a1 HTTP/1.1" 200 0 "-" "-"`+"\n"+
		`192.0.2.1 - - [01/Jan/2026:00:00:02 +0000] "GET /a2 HTTP/1.1" 200 0 "-" "-"`+"\n")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("time,method,path,client_ip\n2026-01-01T00:00:00Z,GET,/b1,192.0.2.2\n2026-01-01T00:00:01Z,GET,/b2,192.0.2.2\n"))
	zw.Close()
	b := write(t, dir, "b.csv.gz", gz.String())
	reqs, errs := readAll(t, []string{a, b}, InputOptions{})
	var got []string
	for _, r := range reqs {
		got = append(got, r.Path)
	}
	if strings.Join(got, " ") != "/a1 /b1 /b2 /a2" || len(errs) != 0 {
		t.Errorf("merged %v (errors %v), want /a1 /b1 /b2 /a2", got, errs)
	}
}

func TestDetect(t *testing.T) {
	for line, want := range map[string]string{
		`{"time":"2026-01-01T00:00:00Z","method":"GET","path":"/"}`:                     "json",
		`time,method,path,client_ip`:                                                    "csv",
		`1.2.3.4 - - [01/Jan/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 0 "-" "-" "xff"`: "text",
	} {
		if kind, _, err := Detect([]byte(line)); kind != want || err != nil {
			t.Errorf("Detect(%s) = %q, %v; want %q", line, kind, err, want)
		}
	}
	if _, _, err := Detect([]byte("hello")); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("Detect(hello) = %v, want an error pointing at --log-format", err)
	}
	dir := t.TempDir()
	if _, err := Open([]string{write(t, dir, "empty", "\n\n")}, InputOptions{}, openFile); err == nil {
		t.Error("Open(an empty file): no error")
	}
}

// A line longer than MaxLineBytes is one malformed line, and the next one
// is read.
func TestLongLine(t *testing.T) {
	dir := t.TempDir()
	ok := `192.0.2.1 - - [01/Jan/2026:00:00:00 +0000] "GET /ok HTTP/1.1" 200 0 "-" "-"` + "\n"
	p := write(t, dir, "a.log", ok+`192.0.2.1 - - [01/Jan/2026:00:00:00 +0000] "GET /`+strings.Repeat("x", MaxLineBytes*2)+` HTTP/1.1" 200 0 "-" "-"`+"\n"+ok)
	reqs, errs := readAll(t, []string{p}, InputOptions{})
	if len(reqs) != 2 || len(errs) != 1 || !strings.Contains(errs[0], ":2: ") {
		t.Errorf("read %d requests, errors %v; want 2 and one error on line 2", len(reqs), errs)
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add(`203.0.113.7 - frank [10/Oct/2025:13:55:36 +0200] "GET /api/items?id=1 HTTP/1.1" 200 2326 "http://example.com/" "curl/8.0"`)
	f.Add(`10.0.0.2 - - [10/Oct/2025:13:55:36 +0000] "POST /a%20b/\x22c HTTP/2.0" 429 0 "-" "x" "198.51.100.1"`)
	f.Add(`2026-01-01T00:00:00.5Z,GET,"/a""b",192.0.2.1,k1`)
	_, combined, _ := ParseFormat("combined")
	custom, _ := ParseNginxFormat("x", `$remote_addr $msec $request_time "$request" "$http_x_api_key" $content_length`)
	f.Fuzz(func(t *testing.T, line string) {
		for _, fm := range []*Format{combined, custom} {
			p := &parser{f: fm}
			r := &Request{}
			r.reset()
			if err := p.parse([]byte(line), r); err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("parse(%q) = %v: not ErrMalformed", line, err)
			}
		}
		cp := newCSVParser(false)
		r := &Request{}
		r.reset()
		_ = cp([]byte(line), r)
	})
}

// TestParseResponse: the response's status, body bytes and header fields,
// and the query when asked, from nginx, Apache and CSV lines.
func TestParseResponse(t *testing.T) {
	for _, c := range []struct {
		format, line string
		status       int
		bytes        int64
		tokens, q    string
	}{
		{`nginx:$remote_addr [$time_local] "$request" $status $body_bytes_sent "$upstream_http_x_tokens_used"`,
			`192.0.2.1 [10/Oct/2025:13:55:36 +0000] "POST /v1/chat?model=a%20b&k=1 HTTP/1.1" 200 1830 "1187"`, 200, 1830, "1187", "model=a%20b&k=1"},
		{`nginx:$remote_addr [$time_local] "$request" $status $body_bytes_sent "$sent_http_x_tokens_used"`,
			`192.0.2.1 [10/Oct/2025:13:55:36 +0000] "POST /v1/chat HTTP/1.1" 401 0 "-"`, 401, 0, "", ""},
		{`apache:%h %t "%r" %>s %b "%{X-Tokens-Used}o"`,
			`192.0.2.1 [10/Oct/2025:13:55:36 +0000] "GET /x?a=1 HTTP/1.1" 204 - "7"`, 204, 0, "7", "a=1"},
	} {
		_, f, err := ParseFormat(c.format)
		if err != nil {
			t.Fatal(err)
		}
		p := &parser{f: f, query: true}
		r := &Request{}
		r.reset()
		if err := p.parse([]byte(c.line), r); err != nil {
			t.Errorf("%s: parse(%s): %v", c.format, c.line, err)
			continue
		}
		if r.Status != c.status || r.Bytes != c.bytes || r.RespHeader.Get("X-Tokens-Used") != c.tokens || r.RawQuery != c.q {
			t.Errorf("%s: parse(%s) = status %d bytes %d tokens %q query %q, want %d %d %q %q", c.format, c.line,
				r.Status, r.Bytes, r.RespHeader.Get("X-Tokens-Used"), r.RawQuery, c.status, c.bytes, c.tokens, c.q)
		}
	}
	_, f, _ := ParseFormat(`nginx:$remote_addr [$time_local] "$request" $body_bytes_sent`)
	r := &Request{}
	r.reset()
	if err := (&parser{f: f}).parse([]byte(`192.0.2.1 [10/Oct/2025:13:55:36 +0000] "GET / HTTP/1.1" many`), r); !errors.Is(err, ErrMalformed) {
		t.Errorf("body bytes %q: error %v, want ErrMalformed", "many", err)
	}

	cp := newCSVParser(true)
	r.reset()
	if err := cp([]byte("time,method,path,client_ip,status,bytes,response_header:x-tokens-used"), r); !errors.Is(err, errHeaderLine) {
		t.Fatalf("CSV header line: %v", err)
	}
	r.reset()
	if err := cp([]byte("1700000000.5,GET,/s?q=x,192.0.2.1,401,12,33"), r); err != nil {
		t.Fatal(err)
	}
	if r.Status != 401 || r.Bytes != 12 || r.RespHeader.Get("X-Tokens-Used") != "33" || r.RawQuery != "q=x" || r.Path != "/s" {
		t.Errorf("CSV line = status %d bytes %d tokens %q query %q path %q, want 401 12 33 q=x /s", r.Status, r.Bytes,
			r.RespHeader.Get("X-Tokens-Used"), r.RawQuery, r.Path)
	}
	for _, bad := range []string{"1700000000.5,GET,/,192.0.2.1,99,12,33", "1700000000.5,GET,/,192.0.2.1,200,-1,33"} {
		r.reset()
		if err := cp([]byte(bad), r); !errors.Is(err, ErrMalformed) {
			t.Errorf("CSV line %q: error %v, want ErrMalformed", bad, err)
		}
	}
}

// TestCountFieldErrors: a count field that is not a whole number is a
// malformed line whose error names the field, in CSV and nginx logs alike.
func TestCountFieldErrors(t *testing.T) {
	for _, c := range []struct{ format, line, field string }{
		{`nginx:$time_iso8601 $request_method $uri $content_length`, `2026-01-01T00:00:01+01:00 PUT /up -5`, "content length"},
		{`nginx:$time_iso8601 $request_method $uri $content_length`, `2026-01-01T00:00:01+01:00 PUT /up 1k`, "content length"},
		{`nginx:$time_iso8601 $request_method $uri $body_bytes_sent`, `2026-01-01T00:00:01+01:00 GET / 3.5`, "body bytes"},
	} {
		if _, err := parseWith(t, c.format, c.line); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: parse(%s) = %v, want ErrMalformed naming %q", c.format, c.line, err, c.field)
		}
	}
	for _, c := range []struct{ line, field string }{
		{"1700000000,PUT,/up,192.0.2.1,-5,200,0", "content_length"},
		{"1700000000,PUT,/up,192.0.2.1,12x,200,0", "content_length"},
		{"1700000000,GET,/,192.0.2.1,0,200,many", "bytes"},
	} {
		cp := newCSVParser(false)
		r := &Request{}
		r.reset()
		if err := cp([]byte("time,method,path,client_ip,content_length,status,bytes"), r); !errors.Is(err, errHeaderLine) {
			t.Fatalf("CSV header line: %v", err)
		}
		r.reset()
		if err := cp([]byte(c.line), r); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("CSV line %q = %v, want ErrMalformed naming %q", c.line, err, c.field)
		}
	}
}
