package accesslog

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func sample() Entry {
	return Entry{
		Time: time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC), Method: "POST", Host: "api.example.com",
		Path: "/v1/ü \"q\"\n", Query: "page=2", Peer: "10.0.0.1", ClientIP: "203.0.113.9",
		Header:        []Header{{"X-Api-Key", "k=1 \\ 2"}, {"X-Forwarded-For", "203.0.113.9"}},
		APIKey:        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		ContentLength: 42, Status: 429, Bytes: 180, RespHeader: []Header{{"X-Tokens-Used", "17"}}, Latency: 1500 * time.Microsecond,
		Route: "api", Upstream: "app", Rule: "per-key", Key: "header:X-Api-Key=k", Decision: "refused",
		Shadow: []string{"new-limit"},
	}
}

func TestJSONRoundTrip(t *testing.T) {
	e := sample()
	line := AppendJSON(nil, &e)
	var generic map[string]any
	if err := json.Unmarshal(line, &generic); err != nil {
		t.Fatalf("AppendJSON wrote invalid JSON %s: %v", line, err)
	}
	var got Entry
	if err := ParseJSON(line, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, e) {
		t.Errorf("ParseJSON(AppendJSON(e)) = %+v, want %+v", got, e)
	}
	// Without optional fields: content_length stays, the rest is omitted.
	min := Entry{Time: e.Time, Method: "GET", Path: "/", ContentLength: -1, Status: 200}
	line = AppendJSON(nil, &min)
	want := `{"time":"2026-03-04T05:06:07.123456789Z","method":"GET","path":"/","content_length":-1,"status":200,"bytes":0,"latency_ms":0}` + "\n"
	if string(line) != want {
		t.Errorf("AppendJSON(minimal) = %s, want %s", line, want)
	}
}

func TestText(t *testing.T) {
	e := sample()
	got := string(AppendText(nil, &e))
	want := `time=2026-03-04T05:06:07.123456789Z method=POST host=api.example.com path="/v1/ü \"q\"\n" query="page=2" peer=10.0.0.1 client_ip=203.0.113.9` +
		` header.X-Api-Key="k=1 \\ 2" header.X-Forwarded-For=203.0.113.9 api_key_sha256=ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad` +
		` status=429 bytes=180 response_header.X-Tokens-Used=17 latency_ms=1.500 route=api upstream=app` +
		` rule=per-key key="header:X-Api-Key=k" decision=refused shadow=new-limit` + "\n"
	if got != want {
		t.Errorf("AppendText =\n%s\nwant\n%s", got, want)
	}
}

func TestParseJSONErrors(t *testing.T) {
	for _, line := range []string{
		``, `{`, `[]`, `{"method":"GET","path":"/"}`,
		`{"time":"yesterday","method":"GET","path":"/"}`,
		`{"time":"2026-03-04T05:06:07Z","path":"/"}`,
		`{"time":"2026-03-04T05:06:07Z","method":"GET"}`,
		`{"time":"2026-03-04T05:06:07Z","method":"GET","path":"/","status":"x"}`,
	} {
		var e Entry
		if err := ParseJSON([]byte(line), &e); err == nil {
			t.Errorf("ParseJSON(%s) = nil error", line)
		}
	}
}

func FuzzJSONRoundTrip(f *testing.F) {
	f.Add("GET", "/a", "k", "v", "rule", int64(5))
	f.Add("\x00", "\u2028", "\xff", "\"", "", int64(-1))
	f.Fuzz(func(t *testing.T, method, path, hname, hval, rule string, n int64) {
		if method == "" {
			method = "GET"
		}
		e := Entry{Time: time.Unix(0, n).UTC(), Method: method, Path: path, Header: []Header{{hname, hval}},
			ContentLength: n, Status: int(n % 600), Rule: rule}
		line := AppendJSON(nil, &e)
		var got Entry
		if err := ParseJSON(line, &got); err != nil {
			t.Fatalf("ParseJSON(%s): %v", line, err)
		}
		// Strings come back as encoding/json reads them (invalid UTF-8 as
		// U+FFFD).
		var want struct{ Method, Path, Rule string }
		b, _ := json.Marshal(struct{ Method, Path, Rule string }{method, path, rule})
		_ = json.Unmarshal(b, &want)
		if got.Method != want.Method || got.Path != want.Path || got.Rule != want.Rule || got.ContentLength != n || !got.Time.Equal(e.Time) {
			t.Errorf("round trip of %q %q %q %d = %q %q %q %d %v", method, path, rule, n, got.Method, got.Path, got.Rule, got.ContentLength, got.Time)
		}
	})
}

func FuzzParseJSON(f *testing.F) {
	e := sample()
	f.Add(AppendJSON(nil, &e))
	f.Add([]byte(`{"time":"2026-03-04T05:06:07Z","dropped":3}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var e Entry
		_ = ParseJSON(line, &e) // must not panic
	})
}
