package clientip_test

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/portero-rl/portero/clientip"
)

func TestResolve(t *testing.T) {
	trusted, _ := clientip.ParsePrefixes([]string{"10.0.0.0/8", "2001:db8:ffff::/48"})
	xff := clientip.Config{TrustedProxies: trusted}
	fwd := clientip.Config{TrustedProxies: trusted, Header: "Forwarded"}
	tests := []struct {
		name   string
		c      clientip.Config
		remote string
		hdr    []string
		want   string
	}{
		{"untrusted peer", xff, "192.0.2.1:5000", []string{"203.0.113.1"}, "192.0.2.1"},
		{"no proxies", clientip.Config{}, "10.0.0.1:5000", []string{"203.0.113.1"}, "10.0.0.1"},
		{"trusted peer", xff, "10.0.0.1:5000", []string{"203.0.113.1"}, "203.0.113.1"},
		{"rightmost untrusted", xff, "10.0.0.1:1", []string{"6.6.6.6, 203.0.113.1, 10.1.1.1"}, "203.0.113.1"},
		{"two lines in order", xff, "10.0.0.1:1", []string{"6.6.6.6, 203.0.113.1", "10.1.1.1"}, "203.0.113.1"},
		{"port and brackets", xff, "10.0.0.1:1", []string{"[2001:db8::1]:443"}, "2001:db8::1"},
		{"mapped v4", xff, "10.0.0.1:1", []string{"::ffff:203.0.113.9"}, "203.0.113.9"},
		{"garbage hop", xff, "10.0.0.1:1", []string{"203.0.113.1, garbage, 10.2.2.2"}, "10.2.2.2"},
		{"all trusted", xff, "10.0.0.1:1", []string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3"},
		{"empty header", xff, "10.0.0.1:1", nil, "10.0.0.1"},
		{"v6 peer", xff, "[2001:db8:ffff::5]:1", []string{"2001:db8:1::1"}, "2001:db8:1::1"},
		{"forwarded", fwd, "10.0.0.1:1", []string{`for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https, for=10.9.9.9`}, "2001:db8:cafe::17"},
		{"forwarded unknown", fwd, "10.0.0.1:1", []string{"for=unknown"}, "10.0.0.1"},
		{"forwarded obfuscated", fwd, "10.0.0.1:1", []string{"for=_hidden, for=10.4.4.4"}, "10.4.4.4"},
		{"forwarded malformed", fwd, "10.0.0.1:1", []string{`for="unterminated`}, "10.0.0.1"},
		{"forwarded case", fwd, "10.0.0.1:1", []string{"For=203.0.113.5;BY=10.0.0.1"}, "203.0.113.5"},
		{"zone peer", xff, "[fe80::1%eth0]:1", nil, "fe80::1"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		name := tt.c.Header
		if name == "" {
			name = "X-Forwarded-For"
		}
		for _, v := range tt.hdr {
			r.Header.Add(name, v)
		}
		if got := tt.c.Resolve(r); got.String() != tt.want {
			t.Errorf("%s: Resolve = %v, want %s", tt.name, got, tt.want)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "@unix"
	if got := xff.Resolve(r); got.IsValid() {
		t.Errorf("unix socket: Resolve = %v, want invalid", got)
	}
}

func FuzzForwarded(f *testing.F) {
	for _, s := range []string{`for=192.0.2.60;proto=http;by=203.0.113.43`, `for="[2001:db8:cafe::17]:4711"`, `for=unknown, for=_x`, `for="\"`, `;;,,`, `for=a;for=b`} {
		f.Add(s)
	}
	trusted, _ := clientip.ParsePrefixes([]string{"0.0.0.0/0", "::/0"})
	c := clientip.Config{TrustedProxies: trusted[:1], Header: "Forwarded"}
	f.Fuzz(func(t *testing.T, s string) {
		hops, err := clientip.ParseForwarded([]string{s})
		if err == nil {
			for _, h := range hops {
				clientip.ParseHop(h)
			}
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:1"
		r.Header.Set("Forwarded", s)
		if a := c.Resolve(r); !a.IsValid() {
			t.Fatalf("Resolve(%q) = invalid address", s)
		}
	})
}

func FuzzXForwardedFor(f *testing.F) {
	for _, s := range []string{"203.0.113.1, 10.0.0.1", "[::1]:80", "garbage,,", "::ffff:1.2.3.4", "fe80::1%eth0"} {
		f.Add(s)
	}
	trusted, _ := clientip.ParsePrefixes([]string{"10.0.0.0/8"})
	c := clientip.Config{TrustedProxies: trusted}
	f.Fuzz(func(t *testing.T, s string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:1"
		r.Header.Set("X-Forwarded-For", s)
		a := c.Resolve(r)
		if !a.IsValid() {
			t.Fatalf("Resolve(%q) = invalid", s)
		}
		// The answer is the peer or one of the hops, never something made up.
		if a != netip.MustParseAddr("10.0.0.1") {
			found := false
			for _, h := range clientip.ParseXForwardedFor([]string{s}) {
				if b, ok := clientip.ParseHop(h); ok && b == a {
					found = true
				}
			}
			if !found {
				t.Fatalf("Resolve(%q) = %v, not among the hops", s, a)
			}
		}
	})
}

// TestParsePrefixesMapped: an IPv4-mapped prefix is read as the IPv4
// prefix it denotes, at every length from /96, and a Config given one
// directly (not through ParsePrefixes) trusts the same addresses.
func TestParsePrefixesMapped(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:0:0/96":            "0.0.0.0/0",
		"::ffff:198.51.100.0/120":  "198.51.100.0/24",
		"::ffff:198.51.100.77/120": "198.51.100.0/24",
		"::ffff:198.51.100.7":      "198.51.100.7/32",
		"198.51.100.7":             "198.51.100.7/32",
		"2001:db8::1/32":           "2001:db8::/32",
	} {
		got, err := clientip.ParsePrefixes([]string{in})
		if err != nil || len(got) != 1 || got[0] != netip.MustParsePrefix(want) {
			t.Errorf("ParsePrefixes(%s) = %v, %v; want %s", in, got, err, want)
		}
	}
	direct := clientip.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:198.51.100.0/120")}}
	if !direct.Trusted(netip.MustParseAddr("198.51.100.9")) || !direct.Trusted(netip.MustParseAddr("::ffff:198.51.100.9")) || direct.Trusted(netip.MustParseAddr("198.51.101.9")) {
		t.Error("a mapped /120 given directly does not trust exactly 198.51.100.0/24")
	}
}
