package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
)

// TestUseTLS: Config.TLS replaces a rediss:// URL's TLS configuration
// keeping its server name, and a rediss-sentinel:// URL's for the
// sentinels too (the TLS settings serve both, as envoyproxy/ratelimit's);
// a plain redis:// URL with TLS settings is an error.
func TestUseTLS(t *testing.T) {
	pool := x509.NewCertPool()
	cfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{{}}}
	for _, tt := range []struct {
		url, server string
		sentinel    bool
	}{
		{"rediss://redis.internal:6380", "redis.internal", false},
		{"rediss-sentinel://s1:26379,s2:26379/mymaster", "", true},
	} {
		opt, err := parseURL(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if err := useTLS(&opt, cfg, true); err != nil {
			t.Fatalf("%s: %v", tt.url, err)
		}
		if opt.TLSConfig.RootCAs != pool || len(opt.TLSConfig.Certificates) != 1 || opt.TLSConfig.ServerName != tt.server {
			t.Errorf("%s: TLS config %+v: want the given CA and certificate, server name %q", tt.url, opt.TLSConfig, tt.server)
		}
		if s := opt.Sentinel.TLSConfig; tt.sentinel && (s == nil || s.RootCAs != pool || len(s.Certificates) != 1) {
			t.Errorf("%s: the sentinels' TLS config %+v: want the given CA and certificate", tt.url, s)
		}
	}
	opt, err := parseURL("redis://127.0.0.1:6379")
	if err != nil {
		t.Fatal(err)
	}
	if err := useTLS(&opt, cfg, true); err == nil || !strings.Contains(err.Error(), "rediss://") {
		t.Errorf("redis:// with TLS settings: error %v, want one naming rediss://", err)
	}
}
