package config

import (
	"net/http"
	"strings"
)

// RequestHeaders returns the request headers the configuration reads,
// under canonical names, each once, in the order the file names them:
// those its rules key on (header:NAME), match (match.headers, rules' and
// routes') and take a cost from (cost: header:NAME), the identity headers,
// and the client-address header when trusted proxies make it count
// (X-Forwarded-For by default). The access log records these, so that
// `portero replay` can decide a request again as serve did.
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
	headerArg := func(s string) {
		if word, arg, ok := strings.Cut(strings.TrimSpace(s), ":"); ok && strings.EqualFold(strings.TrimSpace(word), "header") {
			add(arg)
		}
	}
	for _, r := range f.Rules {
		for _, part := range strings.Split(r.Key, "+") {
			headerArg(part)
		}
		headerArg(r.Cost)
		for _, name := range sortedKeys(r.Match.Headers) {
			add(name)
		}
	}
	for _, r := range f.Routes {
		for _, name := range sortedKeys(r.Match.Headers) {
			add(name)
		}
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
