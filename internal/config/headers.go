package config

import (
	"net/http"
	"strings"
)

// RequestHeaders returns the request headers the configuration reads,
// under canonical names, each once: those its rules — the file's own and
// those its levels, plans and rate rules compile into — key on
// (header:NAME, Cookie for cookie:NAME), take a cost from and match, the
// routes' and the plans' routes' match headers, the API key's header, the
// identity headers, and the client-address header when trusted proxies
// make it count (X-Forwarded-For by default). The access log records
// these, so that `portero replay` can decide a request again as serve did.
func (c *Config) RequestHeaders() []string {
	var out []string
	seen := map[string]bool{}
	add := func(name string) {
		name = strings.TrimSpace(name)
		if name == "" {
			return
		}
		name = http.CanonicalHeaderKey(name)
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	f := &c.File
	// The rules as compiled: the file's own and those the API-gateway
	// model makes (levels, plans, rate rules).
	for _, name := range c.Policy.RequestHeaders() {
		add(name)
	}
	for _, r := range f.Routes {
		for _, name := range sortedKeys(r.Match.Headers) {
			add(name)
		}
	}
	for _, pn := range sortedKeys(f.Plans) {
		for _, m := range f.Plans[pn].Routes {
			for _, name := range sortedKeys(m.Headers) {
				add(name)
			}
		}
	}
	if c.Gateway.Keys != nil {
		add(c.Gateway.KeyHeader)
	}
	add(f.Identity.UserHeader)
	add(f.Identity.TenantHeader)
	if len(c.ClientIP.TrustedProxies) > 0 {
		h := c.ClientIP.Header
		if h == "" {
			h = "X-Forwarded-For"
		}
		add(h)
	}
	return out
}
