package checkapi

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/policy/policytest"
)

// TestCheckStrictBody: /v1/check reads only application/json (with an
// optional charset=utf-8), and a JSON object that names a member twice is
// refused, at any depth, instead of the last value silently winning.
func TestCheckStrictBody(t *testing.T) {
	f := newFixture(t, nil)
	ok := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`
	for _, tt := range []struct {
		name, ctype, body string
		status            int
		detail            string
	}{
		{"json", "application/json", ok, 200, ""},
		{"charset", "application/json; charset=utf-8", ok, 200, ""},
		{"upper case", "Application/JSON", ok, 200, ""},
		{"jsonx", "application/jsonx", ok, 415, "application/json"},
		{"json-seq", "application/json-seq", ok, 415, "application/json"},
		{"latin1", "application/json; charset=latin1", ok, 415, "charset"},
		{"malformed type", "application/json; =", ok, 415, "Content-Type"},
		{"duplicate domain", "application/json", `{"domain":"nope","domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1"}]}]}`, 400, `duplicate member \"domain\"`},
		{"duplicate nested", "application/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1","value":"2"}]}]}`, 400, `duplicate member \"value\" in descriptors[0].entries[0]`},
		{"duplicate in limit", "application/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"unit":"second","unit":"day","requests_per_unit":1}}]}`, 400, `duplicate member \"unit\" in descriptors[0].limit`},
		{"same name in siblings", "application/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1"},{"key":"x","value":"2"}]}]}`, 200, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", f.srv.URL+"/v1/check", strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.ctype)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.Contains(string(raw), tt.detail) {
				t.Errorf("POST (%s) = %d %s, want %d containing %q", tt.ctype, resp.StatusCode, raw, tt.status, tt.detail)
			}
			if tt.status != 200 && resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("refusal Content-Type = %q, want application/problem+json", resp.Header.Get("Content-Type"))
			}
		})
	}
}

// TestCheckFailurePolicyHeaders: when the failure policy answers (the store
// failed), /v1/check keeps RateLimit-Policy but sends no RateLimit values,
// which would be made up.
func TestCheckFailurePolicyHeaders(t *testing.T) {
	const body = `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1"}]}]}`
	for _, fp := range []portero.FailurePolicy{portero.FailAllow, portero.FailDeny, portero.FailLocal} {
		st := &policytest.Store{}
		st.SetErr(fmt.Errorf("down: %w", portero.ErrStoreUnavailable))
		f := newFixtureWith(t, setup{store: st, onError: fp})
		resp, out, raw := f.post(t, body)
		if resp.StatusCode != 200 || out.Degraded == "" {
			t.Fatalf("%s: %d %s", fp, resp.StatusCode, raw)
		}
		if v, ok := resp.Header["Ratelimit"]; ok {
			t.Errorf("%s: RateLimit = %q, want none", fp, v)
		}
		if resp.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("%s: no RateLimit-Policy", fp)
		}
	}
}

// TestProblemsQuoteAShortPrefix: what a client sent — a Content-Type, a
// JSON member or value, a query value — is repeated in a problem detail as
// a short prefix, however long it was.
func TestProblemsQuoteAShortPrefix(t *testing.T) {
	f := newFixture(t, nil)
	long := strings.Repeat("x", 16<<10)
	ok := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1"}]}]}`
	for _, tt := range []struct {
		name, method, url, ctype, body string
	}{
		{"content type", "POST", "/v1/check", "text/" + long, ok},
		{"content type parameter", "POST", "/v1/check", "application/json; p=" + long, ok},
		{"duplicate member", "POST", "/v1/check", "application/json", `{"` + long + `":1,"` + long + `":2}`},
		{"duplicate member deep", "POST", "/v1/check", "application/json", `{"` + long + `":{"a":1,"a":2}}`},
		{"unknown domain", "POST", "/v1/check", "application/json", `{"domain":"` + long[:1000] + `","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`},
		{"deny_status", "GET", "/v1/auth?domain=edge&deny_status=" + long, "", ""},
		{"descriptor", "GET", "/v1/auth?domain=edge&descriptor=" + long, "", ""},
		{"placeholder", "GET", "/v1/auth?domain=edge&descriptor=k={" + long + "}", "", ""},
		{"unclosed", "GET", "/v1/auth?domain=edge&descriptor=k={" + long, "", ""},
	} {
		req, _ := http.NewRequest(tt.method, f.srv.URL+tt.url, strings.NewReader(tt.body))
		if tt.ctype != "" {
			req.Header.Set("Content-Type", tt.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || len(raw) > 600 || !strings.Contains(string(raw), "xxxx") {
			t.Errorf("%s: %d, %d bytes: %.200s; want a refusal quoting a short prefix", tt.name, resp.StatusCode, len(raw), raw)
		}
	}
}

// TestProblemsAreWholeAnswers: /v1/check's and /v1/auth's error answers are
// written as every HTTP door's: problem+json with its Content-Length,
// nosniff and no-store.
func TestProblemsAreWholeAnswers(t *testing.T) {
	f := newFixture(t, nil)
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/v1/check", `{"domain":`},
		{"GET", "/v1/check", ""},
		{"GET", "/v1/auth?domain=edge&deny_status=7", ""},
	} {
		req, _ := http.NewRequest(tt.method, f.srv.URL+tt.path, strings.NewReader(tt.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode < 400 || h.Get("Content-Type") != "application/problem+json" || h.Get("Content-Length") != fmt.Sprint(len(raw)) ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("%s %s: %d %v %s; want a problem with its length, nosniff, no-store", tt.method, tt.path, resp.StatusCode, h, raw)
		}
	}
}
