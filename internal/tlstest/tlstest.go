// Package tlstest makes certificate authorities and certificates for tests,
// in memory and in the test's temporary directory, so that no key is ever
// committed. Keys are ECDSA P-256: quick to make, quick to use.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA's certificate.
	PEM []byte
}

// nextSerial is a random 127-bit serial number, so that certificates made
// by parallel tests never share one.
func nextSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// NewCA makes a CA named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool returns a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issued is a certificate and its key, PEM.
type Issued struct {
	CertPEM, KeyPEM []byte
	// Serial tells certificates apart (rotation tests).
	Serial *big.Int
}

// TLS returns the pair as a tls.Certificate.
func (is Issued) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(is.CertPEM, is.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Server issues a server certificate for localhost, 127.0.0.1 and ::1.
func (ca *CA) Server(t testing.TB) Issued {
	return ca.issue(t, "localhost", x509.ExtKeyUsageServerAuth, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback})
}

// ServerNamed issues a server certificate for the DNS names only: a client
// that dials 127.0.0.1 or localhost cannot verify it by name.
func (ca *CA) ServerNamed(t testing.TB, names ...string) Issued {
	return ca.issue(t, names[0], x509.ExtKeyUsageServerAuth, names, nil)
}

// Client issues a client certificate with common name names[0] and the
// subject alternative names names: a URI when it holds "://" (a SPIFFE
// ID), a DNS name otherwise.
func (ca *CA) Client(t testing.TB, names ...string) Issued {
	return ca.issue(t, names[0], x509.ExtKeyUsageClientAuth, names, nil)
}

func (ca *CA) issue(t testing.TB, cn string, usage x509.ExtKeyUsage, names []string, ips []net.IP) Issued {
	t.Helper()
	var dns []string
	var uris []*url.URL
	for _, n := range names {
		if !strings.Contains(n, "://") {
			dns = append(dns, n)
			continue
		}
		u, err := url.Parse(n)
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, u)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		URIs:         uris,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		Serial:  tmpl.SerialNumber,
	}
}

// Write writes the pair to dir/name.crt and dir/name.key, replacing them
// by a rename (as certificate managers do, so that a reader never sees
// half a file), and returns the two paths.
func (is Issued) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	WriteFile(t, keyFile, is.KeyPEM)
	WriteFile(t, certFile, is.CertPEM)
	return certFile, keyFile
}

// WriteCA writes the CA's certificate to dir/name.crt and returns the path.
func (ca *CA) WriteCA(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name+".crt")
	WriteFile(t, p, ca.PEM)
	return p
}

// WriteFile replaces path's content by a write to a temporary file and a
// rename.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// ClientConfig returns a client configuration that trusts ca only and, when
// cert is not nil, presents it.
func ClientConfig(ca *CA, cert *tls.Certificate) *tls.Config {
	c := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c
}
