package gateway_test

import (
	"net/http"
	"testing"
)

// TestIPv4MappedPrefixes: an IPv4-mapped prefix in a trusted-proxy list or
// an address list is the IPv4 prefix it denotes, whatever its length: a
// proxy on 127.0.0.1 listed as ::ffff:127.0.0.1, ::ffff:127.0.0.0/104 or
// ::ffff:0:0/96 is trusted, and the client it names, 198.51.100.7, is in
// the list ::ffff:198.51.100.0/120 (its second request refused), while
// 203.0.113.9 is not.
func TestIPv4MappedPrefixes(t *testing.T) {
	up, _, _ := upstream(t)
	for _, proxy := range []string{"::ffff:127.0.0.1", "::ffff:127.0.0.0/104", "::ffff:0:0/96"} {
		_, srv, _ := gw(t, `upstreams: {api: {url: "`+up.URL+`"}}
routes: [{name: api, upstream: api}]
client_ip: {trusted_proxies: ["`+proxy+`"]}
address_lists:
  abusive: ["::ffff:198.51.100.0/120"]
rules:
  - {name: abusive, match: {addresses: [abusive]}, key: ip, limit: 1/min}
`)
		for _, c := range []struct {
			client string
			second int
		}{{"198.51.100.7", http.StatusTooManyRequests}, {"203.0.113.9", http.StatusOK}} {
			for i, want := range []int{http.StatusOK, c.second} {
				if resp, body := get(t, srv.URL+"/x", "X-Forwarded-For", c.client); resp.StatusCode != want {
					t.Errorf("trusted %s: request %d from %s = %d %s, want %d", proxy, i+1, c.client, resp.StatusCode, body, want)
				}
			}
		}
	}
}
