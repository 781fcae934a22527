package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/textproto"
	"net/url"
	"path"
	"strings"

	"github.com/portero-rl/portero/engine"
)

// A Key says under which name a rule counts a request: one part or several
// joined with "+", such as "ip", "header:X-API-Key",
// "tenant+user" or "ip+route". The parts are:
//
//	ip             the client address (Request.ClientIP), IPv6 grouped by the
//	               policy's IPv6 prefix (default /64), IPv4 by its IPv4 prefix
//	               (default /32)
//	header:NAME    the first value of request header NAME, such as X-API-Key
//	user, tenant   the identity set by earlier middleware or taken from a
//	               configured header (Request.Identity["user"], ["tenant"])
//	identity:NAME  any other identity value, Request.Identity[NAME]
//	route          the route the request matched (Request.Route), or the
//	               rule's own method and path pattern when none is named
//	method         the request method
//	host           the request host, lower case, without port
//	global         a constant: one counter for every request the rule matches
//	path           the request path, cleaned (as matching sees it)
//	query:NAME     the first value of query argument NAME
//	cookie:NAME    the value of cookie NAME
//	forwarded-ip   the client address when it came from the forwarding
//	               header of a trusted proxy (Request.Forwarded), grouped as
//	               ip is; no value when it came from the connection
//
// When a part has no value for a request (no such header, no user), the rule
// does not apply to that request: it is neither counted nor refused. Stack a
// rule keyed by ip to cover requests without an API key.
//
// Values longer than 64 bytes are replaced by their SHA-256, so that a
// client cannot make the store keep arbitrarily long keys.
type Key struct {
	raw   string
	parts []keyPart
	// constant is the store key when it does not depend on the request
	// (global): computed once, so that such rules build no key per request.
	constant string
}

type keyKind int

const (
	keyIP keyKind = iota
	keyHeader
	keyIdentity
	keyRoute
	keyMethod
	keyHost
	keyGlobal
	keyPath
	keyQuery
	keyCookie
	keyForwarded
)

type keyPart struct {
	kind  keyKind
	name  string // header name (canonical), identity, query or cookie name
	label string // p.String(), kept so that keys are built without concatenation
}

// keyWords are the parts' words; those before keyHeader's take no argument.
var keyWords = [...]string{keyIP: "ip", keyHeader: "header", keyIdentity: "identity", keyRoute: "route", keyMethod: "method",
	keyHost: "host", keyGlobal: "global", keyPath: "path", keyQuery: "query", keyCookie: "cookie", keyForwarded: "forwarded-ip"}

// maxKeyValue is the longest value kept as is in a key.
const maxKeyValue = 64

const keyWant = "ip, header:NAME, user, tenant, identity:NAME, route, method, host, path, query:NAME, cookie:NAME, forwarded-ip or global"

// ParseKey reads a key expression such as "ip", "header:X-API-Key" or
// "tenant+user". Errors name the offending part.
func ParseKey(s string) (Key, error) {
	if strings.TrimSpace(s) == "" {
		return Key{}, fmt.Errorf("empty key: want %s, or parts joined with +", keyWant)
	}
	k := Key{}
	seen := map[string]bool{}
	var canon []string
	for _, raw := range strings.Split(s, "+") {
		part := strings.TrimSpace(raw)
		word, arg, hasArg := strings.Cut(part, ":")
		word = strings.ToLower(strings.TrimSpace(word))
		arg = strings.TrimSpace(arg)
		p, why := parseKeyPart(word, arg, hasArg)
		switch why {
		case "":
		case "unknown":
			return Key{}, fmt.Errorf("key %q: unknown part %q: want %s", s, part, keyWant)
		case "no argument":
			return Key{}, fmt.Errorf("key %q: part %q takes no argument", s, word)
		default:
			return Key{}, fmt.Errorf("key %q: part %q: %s", s, part, why)
		}
		c := p.String()
		p.label = c
		if seen[c] {
			return Key{}, fmt.Errorf("key %q: part %q given twice", s, c)
		}
		seen[c] = true
		canon = append(canon, c)
		k.parts = append(k.parts, p)
	}
	k.raw = strings.Join(canon, "+")
	if len(k.parts) == 1 && k.parts[0].kind == keyGlobal {
		k.constant = string(k.appendTo(nil, nil, nil, nil))
	}
	return k, nil
}

// parseKeyPart reads one part of a key, or says why not: "unknown", "no
// argument", or what it wants.
func parseKeyPart(word, arg string, hasArg bool) (keyPart, string) {
	switch word {
	case "header":
		if !validToken(arg) {
			return keyPart{}, "want header:NAME with a header name such as X-API-Key"
		}
		return keyPart{kind: keyHeader, name: textproto.CanonicalMIMEHeaderKey(arg)}, ""
	case "identity":
		if !validToken(arg) {
			return keyPart{}, "want identity:NAME"
		}
		return keyPart{kind: keyIdentity, name: arg}, ""
	case "query", "cookie":
		if arg == "" || strings.ContainsAny(arg, " \t;=&") {
			return keyPart{}, "want " + word + ":NAME"
		}
		if word == "cookie" {
			return keyPart{kind: keyCookie, name: arg}, ""
		}
		return keyPart{kind: keyQuery, name: arg}, ""
	case "user", "tenant":
		if hasArg {
			return keyPart{}, "no argument"
		}
		return keyPart{kind: keyIdentity, name: word}, ""
	}
	for kind, w := range keyWords {
		if w == word {
			if hasArg {
				return keyPart{}, "no argument"
			}
			return keyPart{kind: keyKind(kind)}, ""
		}
	}
	return keyPart{}, "unknown"
}

// MustParseKey is ParseKey for literals; it panics on a malformed key.
func MustParseKey(s string) Key {
	k, err := ParseKey(s)
	if err != nil {
		panic(err)
	}
	return k
}

// String returns the key expression in canonical form.
func (k Key) String() string { return k.raw }

// IsZero reports whether k is the zero Key (no parts).
func (k Key) IsZero() bool { return len(k.parts) == 0 }

func (p keyPart) String() string {
	switch {
	case p.kind == keyIdentity && (p.name == "user" || p.name == "tenant"):
		return p.name
	case p.name != "":
		return keyWords[p.kind] + ":" + p.name
	}
	return keyWords[p.kind]
}

// Len returns the number of parts of k.
func (k Key) Len() int { return len(k.parts) }

// Dependent reports whether k has a part that depends on what a request
// asks for (route, method, host, path, query) rather than on who asks.
func (k Key) Dependent() bool {
	for _, part := range k.parts {
		switch part.kind {
		case keyRoute, keyMethod, keyHost, keyPath, keyQuery:
			return true
		}
	}
	return false
}

// key returns the store key of req under k for rule r, built in buf (the
// caller's scratch); ok is false when a part has no value. The string is
// fresh, unless it is constant or a key of prev (the request's earlier
// hits): stores may keep it.
func (k Key) key(buf []byte, p *Policy, r *Rule, req *Request, prev []engine.Hit) (key string, out []byte, ok bool) {
	if k.constant != "" {
		return k.constant, buf, true
	}
	b := k.appendTo(buf[:0], p, r, req)
	if b == nil {
		return "", buf, false // keep the scratch buffer for the next rule
	}
	buf = b
	for i := range prev {
		if prev[i].Key == string(buf) { // no allocation for the comparison
			return prev[i].Key, buf, true
		}
	}
	return string(buf), buf, true
}

// appendTo appends the store key of req under k for rule r to b, or
// returns nil when a part has no value; a nil req is for constant keys.
func (k Key) appendTo(b []byte, p *Policy, r *Rule, req *Request) []byte {
	if b == nil {
		b = make([]byte, 0, 64)
	}
	for i, part := range k.parts {
		if i > 0 {
			b = append(b, '+')
		}
		b = append(b, part.label...)
		b = append(b, '=')
		switch part.kind {
		case keyIP:
			if !req.ClientIP.IsValid() {
				return nil
			}
			// A grouped address needs no escaping and is never long.
			b = p.groupIP(req.ClientIP).AppendTo(b)
		case keyHeader:
			v, ok := req.header(part.name)
			if !ok || v == "" {
				return nil
			}
			b = appendKeyValue(b, v)
		case keyIdentity:
			v := req.Identity[part.name]
			if v == "" {
				return nil
			}
			b = appendKeyValue(b, v)
		case keyRoute:
			v := req.Route
			if v == "" {
				v = r.matchString
			}
			b = appendKeyValue(b, v)
		case keyMethod:
			b = appendKeyValue(b, req.Method)
		case keyHost:
			b = appendHost(b, req.Host)
		case keyGlobal:
			b = append(b, '*')
		case keyPath:
			p := req.Path
			if p == "" || p[0] != '/' {
				p = "/" + p
			}
			b = appendKeyValue(b, path.Clean(p))
		case keyQuery:
			v, ok := queryValue(req.RawQuery, part.name)
			if !ok || v == "" {
				return nil
			}
			b = appendKeyValue(b, v)
		case keyCookie:
			v, ok := cookieValue(req.Header["Cookie"], part.name)
			if !ok || v == "" {
				return nil
			}
			b = appendKeyValue(b, v)
		case keyForwarded:
			if !req.Forwarded || !req.ClientIP.IsValid() {
				return nil
			}
			b = p.groupIP(req.ClientIP).AppendTo(b)
		}
	}
	return b
}

// appendKeyValue escapes the separators, so that two requests never share
// a key by accident, and hashes long values.
func appendKeyValue(b []byte, v string) []byte {
	const hexDigits = "0123456789ABCDEF"
	if len(v) > maxKeyValue {
		sum := sha256.Sum256([]byte(v))
		b = append(b, "sha256:"...)
		return hex.AppendEncode(b, sum[:16])
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '%' || c == '+' || c == '=' || c < 0x20 || c == 0x7f {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return b
}

// appendHost appends the host of h as a key value: lower case, without port
// or trailing dot, allocating only when h has upper-case letters.
func appendHost(b []byte, h string) []byte {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			return appendKeyValue(b, strings.ToLower(h))
		}
	}
	return appendKeyValue(b, h)
}

// queryValue returns the first value of argument name in raw query q, as
// url.ParseQuery would (FuzzQueryValue) without a map (no allocation).
func queryValue(q, name string) (string, bool) {
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k != name {
			if uk, err := url.QueryUnescape(k); err != nil || uk != name {
				continue
			}
		}
		uv, err := url.QueryUnescape(v)
		if err != nil {
			return v, true
		}
		return uv, true
	}
	return "", false
}

// cookieValue returns the value of cookie name in Cookie field lines, as
// http.ParseCookie would (FuzzCookieValue) without building every cookie.
func cookieValue(lines []string, name string) (string, bool) {
	for _, line := range lines {
		for c := range strings.SplitSeq(line, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(c), "=")
			if ok && k == name {
				return strings.Trim(v, `"`), true
			}
		}
	}
	return "", false
}

// validToken reports whether s is an RFC 9110 token (header names, identity
// names).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// KeyOf returns the store key under which a rule of p with key k and match
// m (nil without a route part) counts req, as Compile builds it, and false
// when a part has no value: for callers that count beside the policy (a
// tenant to shed, a batch job calling a store with a rule's StoreRule).
func (p *Policy) KeyOf(k Key, m *Match, req *Request) (string, bool) {
	if k.constant != "" {
		return k.constant, true
	}
	r := &Rule{}
	if m != nil && req.Route == "" {
		for _, part := range k.parts {
			if part.kind == keyRoute {
				r.matchString = m.String()
			}
		}
	}
	b := k.appendTo(nil, p, r, req)
	if b == nil {
		return "", false
	}
	return string(b), true
}

// PerClient reports whether k names the client (ip, header, identity,
// cookie), so that a limit under it is the client's own share rather than
// the service's.
func (k Key) PerClient() bool {
	for _, part := range k.parts {
		switch part.kind {
		case keyIP, keyHeader, keyIdentity, keyForwarded, keyCookie:
			return true
		}
	}
	return false
}
