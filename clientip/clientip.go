// Package clientip finds the client's address behind trusted proxies, for
// every door: the connection's peer, or, only when that peer is a trusted
// proxy, the first untrusted hop of one forwarding header, walked from the
// right, so that a forged X-Forwarded-For is ignored alike everywhere. Its
// AddrSet is the address lists both compilers match clients against.
package clientip

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Config says how a door finds the client's address. The zero value uses
// the connection's address only, the one safe choice for a service that
// clients reach directly (X-Forwarded-For is whatever the client wrote).
type Config struct {
	// TrustedProxies lists the networks of the proxies in front: the
	// forwarding header is read only from a peer inside one, walked from
	// the right to the first address outside them.
	TrustedProxies []netip.Prefix
	// Header is the one forwarding header to read: X-Forwarded-For (the
	// default), Forwarded (RFC 7239), or one the edge overwrites, such as
	// X-Real-IP. Only one, so that clients cannot pick the one they forge.
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

// ValidHeaderName reports whether s can name a header a door reads:
// letters, digits, '-' and '_', at least one.
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

// Trusted reports whether a is inside one of the TrustedProxies (both
// read as Canonical does).
func (c *Config) Trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range c.TrustedProxies {
		if Canonical(p).Contains(a) {
			return true
		}
	}
	return false
}

// Resolve returns the client address of r, or the zero Addr when
// RemoteAddr is not an IP address (a Unix socket).
func (c *Config) Resolve(r *http.Request) netip.Addr {
	a, _ := c.ResolveForwarded(r)
	return a
}

// ResolveForwarded is Resolve, also reporting whether the address came
// from the forwarding header rather than the connection.
func (c *Config) ResolveForwarded(r *http.Request) (netip.Addr, bool) {
	return c.ResolveFrom(r.RemoteAddr, r.Header.Values)
}

// ResolveFrom is ResolveForwarded for any protocol: remote is the peer
// ("192.0.2.1:5000"), and values returns every line of the forwarding
// header named Config.Header, in order (the gRPC door's metadata).
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
			// "unknown" or garbage: the nearest address known is the
			// proxy that reported it.
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

// ParseForwarded reads Forwarded (RFC 7239) field lines and returns each
// element's "for", unquoted ("" for none), left to right, or an error for
// malformed syntax.
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

// ParseHop reads one address as RemoteAddr or a forwarding header gives
// it ("192.0.2.1:8080", "[2001:db8::1]:80", "fe80::1%eth0"…), IPv4-mapped
// as IPv4, without zone; false for anything else.
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

// ParsePrefixes reads CIDRs ("10.0.0.0/8") or single addresses, each made
// Canonical: the one reader of trusted-proxy lists and address lists.
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
// zone, an IPv4-mapped prefix (::ffff:198.51.100.0/120) as the IPv4 prefix
// it denotes, since clients are compared in their IPv4 form.
func Canonical(p netip.Prefix) netip.Prefix {
	a, bits := p.Addr().WithZone(""), p.Bits()
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	return netip.PrefixFrom(a, bits).Masked()
}
