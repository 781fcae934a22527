// Package clientip finds the client's address behind trusted proxies: the
// connection's peer, or, only when that peer is a configured trusted proxy,
// the first untrusted hop of one forwarding header (X-Forwarded-For,
// Forwarded or a header the edge sets), walked from the right. Every door
// uses it (the middleware, the gateway, the check API, and the gRPC
// interceptors through the same header in lower-case metadata), so a forged
// X-Forwarded-For is ignored alike everywhere.
package clientip

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Config says how a door finds the client's address. The zero
// value uses the address of the connection only and ignores every
// forwarding header — the only safe choice for a service that clients reach
// directly, since X-Forwarded-For is whatever the client wrote.
type Config struct {
	// TrustedProxies lists the networks of the proxies in front of the
	// service. Forwarding headers are read only when the connecting peer is
	// inside one of them; then the list is walked from the right (the hop
	// nearest to us) and the first address that is not a trusted proxy is
	// the client.
	TrustedProxies []netip.Prefix
	// Header is the one forwarding header to read: "X-Forwarded-For" (the
	// default), "Forwarded" (RFC 7239), or a header your edge sets and
	// overwrites, such as "X-Real-IP". Only one: falling back from one header
	// to another would let clients pick the one they forge.
	Header string
}

// Validate reports a malformed configuration.
func (c *Config) Validate() error {
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			return errors.New("trusted proxies: invalid prefix")
		}
	}
	if c.Header != "" && !ValidHeaderName(c.Header) {
		return fmt.Errorf("header %q: not a header name", c.Header)
	}
	return nil
}

// ValidHeaderName reports whether s can name the headers a door reads
// (Config.Header, and the middleware's identity headers): letters, digits,
// '-' and '_', at least one.
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			continue
		}
		return false
	}
	return true
}

// Trusted reports whether a is inside one of the TrustedProxies, each read
// as Canonical reads it (an IPv4-mapped prefix as the IPv4 prefix it
// denotes; a as IPv4 when it is IPv4-mapped).
func (c *Config) Trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range c.TrustedProxies {
		if Canonical(p).Contains(a) {
			return true
		}
	}
	return false
}

// Resolve returns the client address of r: the connection's peer, or, when
// the peer is a trusted proxy, the rightmost address in the forwarding header
// that is not a trusted proxy. It returns the zero Addr when RemoteAddr is
// not an IP address (a Unix socket, a custom listener).
func (c *Config) Resolve(r *http.Request) netip.Addr {
	a, _ := c.ResolveForwarded(r)
	return a
}

// ResolveForwarded is Resolve, also reporting whether the address came
// from the forwarding header (a trusted proxy named a client in it)
// rather than from the connection.
func (c *Config) ResolveForwarded(r *http.Request) (netip.Addr, bool) {
	return c.ResolveFrom(r.RemoteAddr, r.Header.Values)
}

// ResolveFrom is ResolveForwarded for any protocol: remote is the
// connection's peer address ("192.0.2.1:5000"), and values returns every
// line of the forwarding header named Config.Header (X-Forwarded-For when
// empty), in order; it is called only when the peer is a trusted proxy. The
// gRPC door passes its peer and the header's lower-case metadata.
func (c *Config) ResolveFrom(remote string, values func(name string) []string) (netip.Addr, bool) {
	peer, ok := ParseHop(remote)
	if !ok {
		return netip.Addr{}, false
	}
	if len(c.TrustedProxies) == 0 || !c.Trusted(peer) {
		return peer, false
	}
	a := c.resolveBehind(values, peer)
	return a, a != peer
}

func (c *Config) resolveBehind(header func(string) []string, peer netip.Addr) netip.Addr {
	name := c.Header
	if name == "" {
		name = "X-Forwarded-For"
	}
	values := header(name) // every field line, in order
	var hops []string
	if strings.EqualFold(name, "Forwarded") {
		var err error
		if hops, err = ParseForwarded(values); err != nil {
			return peer // a trusted proxy sent garbage: do not guess
		}
	} else {
		hops = ParseXForwardedFor(values)
	}
	last := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := ParseHop(hops[i])
		if !ok {
			// "unknown", an obfuscated name or garbage: the nearest
			// address we know is the proxy that reported it.
			return last
		}
		if !c.Trusted(a) {
			return a
		}
		last = a
	}
	return last // every hop is a trusted proxy: internal traffic
}

// ParseXForwardedFor splits X-Forwarded-For field lines into hops, left to
// right, combining several lines in order; empty members are dropped.
func ParseXForwardedFor(values []string) []string {
	var hops []string
	for _, v := range values {
		for h := range strings.SplitSeq(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, h)
			}
		}
	}
	return hops
}

// ParseForwarded reads Forwarded (RFC 7239) field lines and returns the
// value of the "for" parameter of each element, left to right, unquoted
// ("" for an element without one). It reports malformed syntax: a pair
// without "=", an unterminated quoted string, a parameter given twice in
// one element.
func ParseForwarded(values []string) ([]string, error) {
	var out []string
	for _, v := range values {
		elems, err := splitQuoted(v, ',')
		if err != nil {
			return nil, err
		}
		for _, elem := range elems {
			if strings.TrimSpace(elem) == "" {
				continue
			}
			pairs, err := splitQuoted(elem, ';')
			if err != nil {
				return nil, err
			}
			forv, seen := "", map[string]bool{}
			for _, pair := range pairs {
				pair = strings.TrimSpace(pair)
				if pair == "" {
					continue
				}
				k, val, ok := strings.Cut(pair, "=")
				if !ok || k == "" {
					return nil, fmt.Errorf("forwarded: %q: want name=value", pair)
				}
				k = strings.ToLower(strings.TrimSpace(k))
				if seen[k] {
					return nil, fmt.Errorf("forwarded: parameter %q given twice in one element", k)
				}
				seen[k] = true
				val = strings.TrimSpace(val)
				if strings.HasPrefix(val, `"`) {
					if val, err = unquote(val); err != nil {
						return nil, err
					}
				}
				if k == "for" {
					forv = val
				}
			}
			out = append(out, forv)
		}
	}
	return out, nil
}

// splitQuoted splits s at sep outside quoted strings.
func splitQuoted(s string, sep byte) ([]string, error) {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	if quoted {
		return nil, errors.New("forwarded: unterminated quoted string")
	}
	return append(parts, s[start:]), nil
}

func unquote(s string) (string, error) {
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", fmt.Errorf("forwarded: %q: malformed quoted string", s)
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		if c == '\\' {
			i++
			if i >= len(s)-1 {
				return "", fmt.Errorf("forwarded: %q: malformed quoted string", s)
			}
			c = s[i]
		} else if c == '"' {
			return "", fmt.Errorf("forwarded: %q: malformed quoted string", s)
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// ParseHop reads one address as it appears in RemoteAddr or a forwarding
// header: "192.0.2.1", "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]:80",
// "[2001:db8::1]", "fe80::1%eth0". IPv4-mapped IPv6 addresses become IPv4,
// zones are dropped. It reports false for anything else ("unknown",
// obfuscated names, garbage).
func ParseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(strings.Trim(strings.TrimSpace(s), `"`))
	if s == "" {
		return netip.Addr{}, false
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// ParsePrefixes reads CIDRs such as "10.0.0.0/8" or single addresses
// ("192.0.2.1" means /32), IPv4 and IPv6, each made Canonical: the one
// reader of the address prefixes of trusted-proxy lists and address lists
// (AddrSet), so that both read a prefix alike.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%q: want a CIDR such as 10.0.0.0/8 or an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, Canonical(p))
	}
	return out, nil
}

// Canonical returns p as clients are matched against it: masked, without
// a zone, and an IPv4-mapped IPv6 prefix (::ffff:198.51.100.0/120, or
// ::ffff:0:0/96 for every IPv4 address) as the IPv4 prefix it denotes
// (198.51.100.0/24), since client addresses are compared in their IPv4
// form (ParseHop unmaps them).
func Canonical(p netip.Prefix) netip.Prefix {
	a, bits := p.Addr().WithZone(""), p.Bits()
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	return netip.PrefixFrom(a, bits).Masked()
}
