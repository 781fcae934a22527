package policy_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/portero-rl/portero/policy"
)

// The key parts cookie:NAME and query:NAME read their values without
// net/http's or net/url's parsers, which build every cookie or argument of
// the request to return one; these fuzzers hold them to the library's
// answer wherever the library accepts the input, and the test below to
// allocating nothing.

func FuzzCookieValue(f *testing.F) {
	for _, s := range []string{"a=1; session=s3cr3t", `session="q"`, "session=", "session=a=b", " session = x ", "x=1;session=2;session=3"} {
		f.Add(s, "session")
	}
	f.Fuzz(func(t *testing.T, line, name string) {
		got, gotOK := policy.CookieValue(http.Header{"Cookie": {line}}, name)
		cookies, err := http.ParseCookie(line)
		if err != nil || name == "" {
			return
		}
		want, wantOK := "", false
		for _, c := range cookies {
			if c.Name == name {
				want, wantOK = c.Value, true
				break
			}
		}
		if got != want || gotOK != wantOK {
			t.Fatalf("CookieValue(%q, %q) = %q, %v, want %q, %v (http.ParseCookie)", line, name, got, gotOK, want, wantOK)
		}
	})
}

func FuzzQueryValue(f *testing.F) {
	for _, s := range []string{"x=1&us%65r=alice%20b&user=bob", "user", "user=&user=2", "a=%zz&user=1", "user=a+b"} {
		f.Add(s, "user")
	}
	f.Fuzz(func(t *testing.T, q, name string) {
		got, gotOK := policy.QueryValue(q, name)
		vals, err := url.ParseQuery(q)
		// A name with an escape or a '+' may also match a raw argument
		// name literally (query:%41 reads ?%41= as well as ?A=): only
		// names that read the same escaped or not are compared.
		if err != nil || name == "" || strings.ContainsAny(name, "%+") {
			return
		}
		want, wantOK := "", false
		if v, ok := vals[name]; ok {
			want, wantOK = v[0], true
		}
		if got != want || gotOK != wantOK {
			t.Fatalf("QueryValue(%q, %q) = %q, %v, want %q, %v (url.ParseQuery)", q, name, got, gotOK, want, wantOK)
		}
	})
}

func TestCookieAndQueryValuesAllocateNothing(t *testing.T) {
	h := http.Header{"Cookie": {"_ga=GA1.2.3; theme=dark; session=s3cr3t; lang=en"}}
	q := "page=2&sort=asc&user=alice&lang=en"
	if n := testing.AllocsPerRun(100, func() {
		if v, ok := policy.CookieValue(h, "session"); !ok || v != "s3cr3t" {
			t.Fatalf("CookieValue = %q, %v, want s3cr3t", v, ok)
		}
		if v, ok := policy.QueryValue(q, "user"); !ok || v != "alice" {
			t.Fatalf("QueryValue = %q, %v, want alice", v, ok)
		}
	}); n != 0 {
		t.Errorf("reading a cookie and a query argument allocates %v times, want 0", n)
	}
}
