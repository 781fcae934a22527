package server

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/portero-rl/portero/internal/config"
)

// tryHint is the command serve prints at start for the gateway at url: a
// dozen GETs of a path that the first route a plain GET from this machine
// reaches matches, so that it answers the upstream's status or 429, never
// a 404. Over TLS curl is told -k: the hint knows the server's certificate,
// not the CA the operator trusts it by. It is "" when no route takes a
// plain GET, or when every request needs an API key, which the hint cannot
// know.
func tryHint(cfg *config.Config, url string) string {
	f := &cfg.File
	if len(f.Plans) > 0 || f.APIKeys.File != "" || len(f.APIKeys.Keys) > 0 {
		return ""
	}
	for _, r := range f.Routes {
		m := r.Match
		if m.Host != "" || len(m.Headers) > 0 || len(m.Addresses) > 0 || len(m.NotAddresses) > 0 ||
			len(m.Methods) > 0 && !slices.ContainsFunc(m.Methods, func(s string) bool { return strings.EqualFold(s, "GET") }) {
			continue
		}
		insecure := ""
		if cfg.ServerTLS.CertFile != "" {
			insecure = "-k "
		}
		return fmt.Sprintf("for i in $(seq 12); do curl -s %s-o /dev/null -w '%%{http_code}\\n' %s%s; done", insecure, url, samplePath(m.Path))
	}
	return ""
}

// wildcard is a path pattern's variable part: a {name}, a {rest...}, a *
// or a **.
var wildcard = regexp.MustCompile(`\{[^}]*\.\.\.\}|\{[^}]*\}|\*\*|\*`)

// samplePath is a path that the path pattern p matches (configuration.md:
// /login, /users/{id} and /users/* one segment, /api/** and
// /files/{rest...} the rest, also nothing).
func samplePath(p string) string {
	if p == "" {
		return "/"
	}
	return wildcard.ReplaceAllStringFunc(p, func(w string) string {
		if w == "**" || strings.HasSuffix(w, "...}") {
			return ""
		}
		return "1"
	})
}
