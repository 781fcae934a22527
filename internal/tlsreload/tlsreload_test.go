package tlsreload_test

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/internal/tlsreload"
	"github.com/portero-rl/portero/internal/tlstest"
)

// serve accepts TLS connections on loopback with cfg, completing each
// handshake, until the test ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
				_, _ = c.Read(make([]byte, 1))
			}()
		}
	}()
	return ln.Addr().String()
}

// dial completes a handshake with addr and returns the serial of the
// server's certificate, or the handshake's error.
func dial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	// TLS 1.3 reports a refused client certificate after the handshake,
	// at the first read.
	c.Write([]byte("x"))
	if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "EOF") {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestRotation: a certificate replaced on disk serves the next handshake,
// without a restart; a broken replacement is refused (logged once) and the
// previous certificate kept; the one after it loads.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	first := ca.Server(t)
	certFile, keyFile := first.Write(t, dir, "server")
	logs := &testenv.Buffer{}
	r, err := tlsreload.New(tlsreload.Files{CertFile: certFile, KeyFile: keyFile}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.ServerConfig())
	client := tlstest.ClientConfig(ca, nil)
	if got, err := dial(addr, client); err != nil || got != first.Serial.String() {
		t.Fatalf("first handshake: serial %s, %v; want %s", got, err, first.Serial)
	}

	second := ca.Server(t)
	second.Write(t, dir, "server")
	if got, err := dial(addr, client); err != nil || got != second.Serial.String() {
		t.Fatalf("after rotation: serial %s, %v; want the new %s", got, err, second.Serial)
	}
	if !strings.Contains(logs.String(), "TLS files reloaded") {
		t.Errorf("no reload logged:\n%s", logs)
	}

	// A key that does not match the certificate: the previous pair serves.
	third := ca.Server(t)
	tlstest.WriteFile(t, certFile, third.CertPEM)
	for i := 0; i < 3; i++ {
		if got, err := dial(addr, client); err != nil || got != second.Serial.String() {
			t.Fatalf("after a broken rotation: serial %s, %v; want the previous %s", got, err, second.Serial)
		}
	}
	if n := strings.Count(logs.String(), "do not load"); n != 1 {
		t.Errorf("the broken pair logged %d times, want once:\n%s", n, logs)
	}
	tlstest.WriteFile(t, keyFile, third.KeyPEM)
	if got, err := dial(addr, client); err != nil || got != third.Serial.String() {
		t.Fatalf("after the key followed: serial %s, %v; want %s", got, err, third.Serial)
	}

	// A file gone (a swap half done): the previous certificate serves.
	os.Remove(keyFile)
	if got, err := dial(addr, client); err != nil || got != third.Serial.String() {
		t.Fatalf("with the key missing: serial %s, %v; want %s", got, err, third.Serial)
	}
}

// TestClientCertificates: with a client CA, a client without a certificate
// and one with a certificate from another CA are refused, one the CA signed
// is admitted; with client SANs only the named client is.
func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "other CA")
	clients := tlstest.NewCA(t, "client CA")
	certFile, keyFile := ca.Server(t).Write(t, dir, "server")
	caFile := clients.WriteCA(t, dir, "clients")
	good, stranger := clients.Client(t, "ops.example"), other.Client(t, "ops.example")
	named := clients.Client(t, "scraper.example")
	wild := clients.Client(t, "*.ingress.svc")
	gc, sc, nc, wc := good.TLS(t), stranger.TLS(t), named.TLS(t), wild.TLS(t)

	for _, tt := range []struct {
		name     string
		sans     []string
		cert     *tls.Certificate
		admits   bool
		hostname bool // ClientSANHostname
	}{
		{"no certificate", nil, nil, false, false},
		{"another CA", nil, &sc, false, false},
		{"signed by the CA", nil, &gc, true, false},
		{"SAN listed", []string{"scraper.example"}, &nc, true, false},
		{"SAN not listed", []string{"scraper.example"}, &gc, false, false},
		{"a wildcard SAN, exactly", []string{"envoy.ingress.svc"}, &wc, false, false},
		{"a wildcard SAN, as a host name", []string{"envoy.ingress.svc"}, &wc, true, true},
		{"as a host name, in another case", []string{"SCRAPER.example"}, &nc, true, true},
		{"as a host name, none valid", []string{"envoy.other.svc"}, &wc, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := tlsreload.New(tlsreload.Files{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, ClientSANs: tt.sans,
				ClientSANHostname: tt.hostname}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, r.ServerConfig())
			_, err = dial(addr, tlstest.ClientConfig(ca, tt.cert))
			if (err == nil) != tt.admits {
				t.Errorf("handshake error %v, want admitted %v", err, tt.admits)
			}
		})
	}
}

// TestLoadErrors: every bad set of files names the field at fault.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	a, b := ca.Server(t), ca.Server(t)
	certFile, keyFile := a.Write(t, dir, "a")
	_, otherKey := b.Write(t, dir, "b")
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not pem"), 0o600)
	missing := filepath.Join(dir, "missing.pem")
	for _, tt := range []struct {
		name  string
		files tlsreload.Files
		field string
		msg   string
	}{
		{"key without certificate", tlsreload.Files{KeyFile: keyFile}, "cert_file", "required"},
		{"certificate without key", tlsreload.Files{CertFile: certFile}, "key_file", "required"},
		{"SANs without CA", tlsreload.Files{CertFile: certFile, KeyFile: keyFile, ClientSANs: []string{"x"}}, "client_ca", "required"},
		{"missing certificate", tlsreload.Files{CertFile: missing, KeyFile: keyFile}, "cert_file", "no such file"},
		{"certificate not PEM", tlsreload.Files{CertFile: junk, KeyFile: keyFile}, "cert_file", "certificate"},
		{"key of another certificate", tlsreload.Files{CertFile: certFile, KeyFile: otherKey}, "key_file", "does not match"},
		{"CA not PEM", tlsreload.Files{CertFile: certFile, KeyFile: keyFile, ClientCAFile: junk}, "client_ca", "no PEM certificate"},
		{"CA missing", tlsreload.Files{CertFile: certFile, KeyFile: keyFile, ClientCAFile: missing}, "client_ca", "no such file"},
	} {
		_, err := tlsreload.Load(tt.files)
		var fe *tlsreload.FileError
		if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: Load = %v (field %v), want a %s error containing %q", tt.name, err, fe, tt.field, tt.msg)
		}
		if _, err := tlsreload.New(tt.files, nil); err == nil {
			t.Errorf("%s: New succeeded", tt.name)
		}
	}
	if _, err := tlsreload.Load(tlsreload.Files{CertFile: certFile, KeyFile: keyFile}); err != nil {
		t.Errorf("a good pair: %v", err)
	}
}
