package rls

import (
	"context"
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

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

// TLS and mTLS on the grpc-go transport, with grpc-go clients and
// certificates made here (nothing is committed).

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// leaf is a certificate the CA issued, with its key, in PEM and as a
// tls.Certificate.
type leaf struct {
	certPEM, keyPEM []byte
	tls             tls.Certificate
}

// issue makes a server (usage ServerAuth) or client (ClientAuth)
// certificate with serial number serial and subject alternative names
// sans: URIs when they contain "://", DNS names otherwise; servers also
// get 127.0.0.1.
func (ca *testCA) issue(t *testing.T, serial int64, client bool, sans ...string) leaf {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "test " + big.NewInt(serial).String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	for _, s := range sans {
		if strings.Contains(s, "://") {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.URIs = append(tmpl.URIs, u)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := leaf{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}
	if l.tls, err = tls.X509KeyPair(l.certPEM, l.keyPEM); err != nil {
		t.Fatal(err)
	}
	return l
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsServer serves the RLS with TLS files in dir on loopback and returns
// its address.
func tlsServer(t *testing.T, o TLSOptions) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, lis, ServerOptions{TLS: o}, "passthrough:///unused", grpc.WithTransportCredentials(insecure.NewCredentials()))
	return lis.Addr().String()
}

// tlsCall makes one ShouldRateLimit call over a new connection with creds
// and returns the serial number of the server's certificate.
func tlsCall(t *testing.T, addr string, creds grpc.DialOption) (int64, error) {
	t.Helper()
	cc, err := grpc.NewClient(addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := ctxTimeout(t)
	defer cancel()
	var p peer.Peer
	if _, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, someRequest, grpc.Peer(&p)); err != nil {
		return 0, err
	}
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return 0, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("peer auth %T, want TLS", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber.Int64(), nil
}

func clientTLS(ca *testCA, certs ...tls.Certificate) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.pool(), Certificates: certs}))
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "server CA")
	srv := ca.issue(t, 10, false, "localhost")
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, cert, srv.certPEM)
	writeFile(t, key, srv.keyPEM)
	addr := tlsServer(t, TLSOptions{CertFile: cert, KeyFile: key})

	if serial, err := tlsCall(t, addr, clientTLS(ca)); err != nil || serial != 10 {
		t.Fatalf("TLS client: serial %d, %v; want 10, nil", serial, err)
	}
	if _, err := tlsCall(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
		t.Error("a plaintext client was served")
	}
	if _, err := tlsCall(t, addr, clientTLS(newCA(t, "another CA"))); err == nil {
		t.Error("a client that does not trust the server's CA connected")
	}
}

func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := newCA(t, "server CA"), newCA(t, "client CA"), newCA(t, "other CA")
	srv := serverCA.issue(t, 10, false)
	cert, key, cas := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	writeFile(t, cert, srv.certPEM)
	writeFile(t, key, srv.keyPEM)
	writeFile(t, cas, clientCA.pem)
	addr := tlsServer(t, TLSOptions{CertFile: cert, KeyFile: key, ClientCAFile: cas,
		ClientSANs: []string{"spiffe://cluster.local/ns/edge/sa/envoy", "envoy.edge.svc"}})

	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"no certificate", nil, false},
		{"wrong SAN", []tls.Certificate{clientCA.issue(t, 20, true, "other.edge.svc", "spiffe://cluster.local/ns/edge/sa/other").tls}, false},
		{"right SAN, other CA", []tls.Certificate{otherCA.issue(t, 21, true, "spiffe://cluster.local/ns/edge/sa/envoy").tls}, false},
		{"right URI SAN", []tls.Certificate{clientCA.issue(t, 22, true, "spiffe://cluster.local/ns/edge/sa/envoy").tls}, true},
		{"right DNS SAN", []tls.Certificate{clientCA.issue(t, 23, true, "envoy.edge.svc").tls}, true},
	} {
		_, err := tlsCall(t, addr, clientTLS(serverCA, tc.certs...))
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want served %v", tc.name, err, tc.ok)
		}
	}
}

// A certificate rotated on disk serves the connections opened after it,
// without a restart; open connections keep theirs; a broken rewrite keeps
// the last good certificate until the files are fixed.
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "server CA")
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(l leaf) {
		writeFile(t, cert, l.certPEM)
		writeFile(t, key, l.keyPEM)
	}
	install(ca.issue(t, 1, false))
	addr := tlsServer(t, TLSOptions{CertFile: cert, KeyFile: key})

	open, err := grpc.NewClient(addr, clientTLS(ca))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	serialOf := func(cc *grpc.ClientConn) int64 {
		t.Helper()
		ctx, cancel := ctxTimeout(t)
		defer cancel()
		var p peer.Peer
		if _, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, someRequest, grpc.Peer(&p)); err != nil {
			t.Fatal(err)
		}
		return p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serialOf(open); s != 1 {
		t.Fatalf("serial %d, want 1", s)
	}
	for _, step := range []struct {
		name   string
		change func()
		want   int64
	}{
		{"rotated", func() { install(ca.issue(t, 2, false)) }, 2},
		{"key of another certificate", func() { writeFile(t, key, ca.issue(t, 99, false).keyPEM) }, 2},
		{"half-written", func() { writeFile(t, cert, []byte("-----BEGIN CERTIFICATE-----\nMIIB")) }, 2},
		{"fixed", func() { install(ca.issue(t, 3, false)) }, 3},
	} {
		step.change()
		if s, err := tlsCall(t, addr, clientTLS(ca)); err != nil || s != step.want {
			t.Errorf("%s: a new connection got serial %d, %v; want %d", step.name, s, err, step.want)
		}
	}
	if s := serialOf(open); s != 1 {
		t.Errorf("the connection opened first now has serial %d, want 1 still", s)
	}
}

func ctxTimeout(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 10*time.Second)
}
