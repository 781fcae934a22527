package policy

import (
	"fmt"
	"net"
	"path"
	"slices"
	"strings"

	"github.com/portero-rl/portero/clientip"
)

// Match selects the requests a rule (or a gateway route) applies to. Every
// non-empty field must match; the zero value matches every request.
type Match struct {
	// Methods lists HTTP methods in upper case (GET, POST…); empty means any.
	Methods []string
	// Path is a path pattern (see ParsePathPattern); empty means any path.
	Path string
	// Host is a host name without port, or "*.example.com" for any
	// subdomain of example.com; empty means any host. Case-insensitive.
	Host string
	// Headers maps a header name to the value it must have; the value "*"
	// means only that the header is present.
	Headers map[string]string
	// Addresses, when not nil, selects only clients whose address
	// (Request.ClientIP) is in the set; NotAddresses excludes the clients
	// in it (a request whose address is unknown is in no set).
	Addresses, NotAddresses *clientip.AddrSet
	// Identity maps an identity name to the value it must have
	// (Request.Identity), such as {"plan": "gold"}: values set by the server
	// or by earlier middleware, never by the client's headers.
	Identity map[string]string

	path PathPattern
	host string // Host in lower case, set by Compile
}

// Compile validates m and prepares its path pattern; policy.New calls it
// for rules, other users (gateway routes) call it before Matches.
func (m *Match) Compile() error {
	for i, meth := range m.Methods {
		if meth == "" || strings.ToUpper(meth) != meth || strings.ContainsAny(meth, " \t/") {
			return fmt.Errorf("methods[%d]: %q: want an upper-case HTTP method such as GET", i, meth)
		}
	}
	p, err := ParsePathPattern(m.Path)
	if err != nil {
		return fmt.Errorf("path: %w", err)
	}
	m.path = p
	if m.Host != "" {
		h := strings.TrimPrefix(m.Host, "*.")
		if h == "" || strings.ContainsAny(h, "/:* \t") {
			return fmt.Errorf("host: %q: want a host name without port, or *.example.com", m.Host)
		}
	}
	m.host = strings.ToLower(m.Host)
	for name := range m.Headers {
		if name == "" || strings.ContainsAny(name, " \t:") {
			return fmt.Errorf("headers: %q: not a header name", name)
		}
	}
	return nil
}

// Matches reports whether req is selected by m.
func (m *Match) Matches(req *Request) bool {
	return m.matchesCaller(req) && m.matchesRequest(req)
}

// matchesCaller reports whether the caller of req (its address and
// identity) is selected by m, whatever it asks for.
func (m *Match) matchesCaller(req *Request) bool {
	for name, want := range m.Identity {
		if req.Identity[name] != want {
			return false
		}
	}
	if m.Addresses != nil && !m.Addresses.Contains(req.ClientIP) {
		return false
	}
	return m.NotAddresses == nil || !m.NotAddresses.Contains(req.ClientIP)
}

// matchesRequest reports whether what req asks for (method, host, path,
// headers) is selected by m.
func (m *Match) matchesRequest(req *Request) bool {
	if len(m.Methods) > 0 && !slices.Contains(m.Methods, req.Method) {
		return false
	}
	if m.Host != "" && !matchHost(m.lowerHost(), req.Host) {
		return false
	}
	if !m.path.Matches(req.Path) {
		return false
	}
	for name, want := range m.Headers {
		got, ok := req.header(name)
		if !ok || (want != "*" && got != want) {
			return false
		}
	}
	return true
}

// String describes m in one line, such as "POST /login", for logs and for
// the route key.
func (m *Match) String() string {
	meth := "*"
	if len(m.Methods) > 0 {
		meth = strings.Join(m.Methods, ",")
	}
	p := m.Path
	if p == "" {
		p = "/**"
	}
	if m.Host != "" {
		return meth + " " + m.Host + p
	}
	return meth + " " + p
}

func (m *Match) lowerHost() string {
	if m.host != "" {
		return m.host
	}
	return strings.ToLower(m.Host) // not compiled
}

// matchHost reports whether host (a Host header, maybe with a port) is
// matched by pattern (lower case), comparing without allocating.
func matchHost(pattern, host string) bool {
	if strings.IndexByte(host, ':') >= 0 { // without a colon SplitHostPort fails (and allocates)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	host = strings.TrimSuffix(host, ".")
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		n := len(host) - len(suffix)
		return n > 1 && host[n-1] == '.' && strings.EqualFold(host[n:], suffix)
	}
	return strings.EqualFold(host, pattern)
}

// PathPattern matches URL paths segment by segment: literal text, "*" or
// "{name}" for one non-empty segment, and last "**" or "{name...}" for zero
// or more ("/api/**" matches /api and below). The path is cleaned first, so
// that "//login/" and "/x/../login" are /login.
type PathPattern struct {
	raw  string
	segs []string // "" for a one-segment wildcard
	rest bool     // ends in a many-segment wildcard
	any  bool     // the empty pattern: every path
}

// ParsePathPattern reads a path pattern; the empty string matches every
// path.
func ParsePathPattern(s string) (PathPattern, error) {
	if s == "" {
		return PathPattern{any: true}, nil
	}
	if !strings.HasPrefix(s, "/") {
		return PathPattern{}, fmt.Errorf("%q: a path pattern starts with /", s)
	}
	p := PathPattern{raw: s}
	parts := strings.Split(strings.TrimPrefix(s, "/"), "/")
	if len(parts) == 1 && parts[0] == "" {
		return p, nil // "/"
	}
	for i, seg := range parts {
		last := i == len(parts)-1
		switch {
		case seg == "**" || (strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "...}")):
			if !last {
				return PathPattern{}, fmt.Errorf("%q: %q must be the last segment", s, seg)
			}
			p.rest = true
		case seg == "*" || (strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") && len(seg) > 2):
			p.segs = append(p.segs, "")
		case seg == "":
			if last {
				return PathPattern{}, fmt.Errorf("%q: a trailing / is ignored when matching; write %q or %q", s, strings.TrimSuffix(s, "/"), s+"**")
			}
			return PathPattern{}, fmt.Errorf("%q: empty segment", s)
		case strings.ContainsAny(seg, "*{}"):
			return PathPattern{}, fmt.Errorf("%q: segment %q: a wildcard must be a whole segment (*, **, {name}, {name...})", s, seg)
		case seg == "." || seg == "..":
			return PathPattern{}, fmt.Errorf("%q: segment %q: patterns are matched against cleaned paths", s, seg)
		default:
			p.segs = append(p.segs, seg)
		}
	}
	return p, nil
}

// String returns the pattern as written.
func (p PathPattern) String() string { return p.raw }

// Matches reports whether the cleaned form of urlPath matches p.
func (p PathPattern) Matches(urlPath string) bool {
	if p.any {
		return true
	}
	if urlPath == "" || urlPath[0] != '/' {
		urlPath = "/" + urlPath
	}
	urlPath = path.Clean(urlPath)
	rest := urlPath[1:]
	for _, seg := range p.segs {
		if rest == "" {
			return false
		}
		var cur string
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			cur, rest = rest[:i], rest[i+1:]
		} else {
			cur, rest = rest, ""
		}
		if seg != "" && seg != cur {
			return false
		}
	}
	return rest == "" || p.rest
}

// MayOverlap reports whether some request could be selected by both m and
// o as far as their methods, hosts and paths tell. Both must be compiled.
func (m *Match) MayOverlap(o *Match) bool {
	if len(m.Methods) > 0 && len(o.Methods) > 0 && !slices.ContainsFunc(m.Methods, func(x string) bool { return slices.Contains(o.Methods, x) }) {
		return false
	}
	if m.Host != "" && o.Host != "" && !hostsOverlap(m.lowerHost(), o.lowerHost()) {
		return false
	}
	return m.path.mayOverlap(o.path)
}

// hostsOverlap reports whether two lower-case host patterns share a host.
func hostsOverlap(a, b string) bool {
	as, aw := strings.CutPrefix(a, "*.")
	bs, bw := strings.CutPrefix(b, "*.")
	switch {
	case !aw && !bw:
		return a == b
	case aw && bw:
		return strings.HasSuffix(as, "."+bs) || strings.HasSuffix(bs, "."+as) || as == bs
	case aw:
		return strings.HasSuffix(b, "."+as)
	default:
		return strings.HasSuffix(a, "."+bs)
	}
}

// mayOverlap reports whether some cleaned path matches both p and o.
func (p PathPattern) mayOverlap(o PathPattern) bool {
	if p.any || o.any {
		return true
	}
	n := min(len(p.segs), len(o.segs))
	for i := range n {
		if a, b := p.segs[i], o.segs[i]; a != "" && b != "" && a != b {
			return false
		}
	}
	switch {
	case len(p.segs) == len(o.segs):
		return true
	case len(p.segs) < len(o.segs):
		return p.rest
	default:
		return o.rest
	}
}

// Contains reports whether every request o selects is also selected by m,
// as far as methods, hosts, paths and headers tell. Both must be compiled.
// Configuration checks use it: a limit inside another's must not promise
// more.
func (m *Match) Contains(o *Match) bool {
	if len(m.Methods) > 0 {
		if len(o.Methods) == 0 {
			return false
		}
		for _, x := range o.Methods {
			if !slices.Contains(m.Methods, x) {
				return false
			}
		}
	}
	if m.Host != "" {
		mh, oh := m.lowerHost(), o.lowerHost()
		switch {
		case oh == "":
			return false
		case mh == oh:
		case strings.HasPrefix(mh, "*."):
			if !strings.HasSuffix(strings.TrimPrefix(oh, "*"), mh[1:]) || strings.TrimPrefix(oh, "*") == mh[1:] {
				return false
			}
		default:
			return false
		}
	}
	for name, want := range m.Headers {
		if got, ok := o.Headers[name]; !ok || (want != "*" && got != want) {
			return false
		}
	}
	return m.path.contains(o.path)
}

// contains reports whether every cleaned path o matches also matches p.
func (p PathPattern) contains(o PathPattern) bool {
	if p.any {
		return true
	}
	if o.any {
		return p.rest && len(p.segs) == 0
	}
	if len(o.segs) < len(p.segs) || !p.rest && (o.rest || len(o.segs) != len(p.segs)) {
		return false
	}
	for i, seg := range p.segs {
		if seg != "" && seg != o.segs[i] {
			return false
		}
	}
	return true
}
