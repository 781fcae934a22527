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
	for _, name := range c.routeHeaders() {
		add(name)
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

// HashedHeaders returns those of RequestHeaders that the configuration
// reads only to tell callers apart — in its rules' keys (header:NAME),
// never to match, to cost, as an identity or as the client's address —
// such as a bearer token or an API key a rule counts by: the access log
// records their SHA-256, never the value, which keys a replay exactly as
// the value would. (The api_keys header is recorded apart, always hashed.)
func (c *Config) HashedHeaders() []string {
	valued := map[string]bool{}
	f := &c.File
	for _, h := range append(c.routeHeaders(), f.Identity.UserHeader, f.Identity.TenantHeader, c.ClientIP.Header, "X-Forwarded-For") {
		if h = strings.TrimSpace(h); h != "" {
			valued[http.CanonicalHeaderKey(h)] = true
		}
	}
	var out []string
	for _, name := range c.Policy.KeyOnlyHeaders() {
		if !valued[name] {
			out = append(out, name)
		}
	}
	return out
}

// routeHeaders returns the headers the routes' and the plans' routes'
// matches read, in file order.
func (c *Config) routeHeaders() []string {
	var out []string
	for _, r := range c.File.Routes {
		out = append(out, sortedKeys(r.Match.Headers)...)
	}
	for _, pn := range sortedKeys(c.File.Plans) {
		for _, m := range c.File.Plans[pn].Routes {
			out = append(out, sortedKeys(m.Headers)...)
		}
	}
	return out
}
