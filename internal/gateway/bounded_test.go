package gateway_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestProblemsQuoteAShortPrefix: a problem body repeats at most a short
// prefix of what the client sent, however long it was: a cost header of
// 64 KiB, a path of 60 KiB outside a plan and outside every route.
func TestProblemsQuoteAShortPrefix(t *testing.T) {
	up, _, _ := upstream(t)
	_, srv, _ := gw(t, `upstreams: {api: {url: "`+up.URL+`"}}
routes: [{name: api, upstream: api, match: {path: /api/**}}]
rules:
  - {name: units, key: ip, limit: 100/s, cost: "header:X-Cost"}
`)
	long := strings.Repeat("1", 64<<10)
	resp, body := get(t, srv.URL+"/api/x", "X-Cost", long)
	if resp.StatusCode != http.StatusBadRequest || len(body) > 400 || !strings.Contains(body, `\"`+long[:64]+`\"… (65536 bytes)`) {
		t.Errorf("64 KiB X-Cost: %d, %d bytes: %.300s; want 400 quoting 64 bytes and the length", resp.StatusCode, len(body), body)
	}
	resp, body = get(t, srv.URL+"/"+strings.Repeat("p", 60<<10))
	if resp.StatusCode != http.StatusNotFound || len(body) > 400 || !strings.Contains(body, "no route matches GET /ppp") {
		t.Errorf("60 KiB path: %d, %d bytes: %.300s; want 404 with a short prefix of the path", resp.StatusCode, len(body), body)
	}
}
