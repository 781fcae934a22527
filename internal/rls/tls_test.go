package rls

import (
	"context"
	"crypto/tls"
	"math/big"
	"net"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/portero-rl/portero/internal/tlstest"
)

// TLS and mTLS on the grpc-go transport, with grpc-go clients and
// certificates made by internal/tlstest (nothing is committed).

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
func tlsCall(t *testing.T, addr string, creds grpc.DialOption) (*big.Int, error) {
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
		return nil, err
	}
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return nil, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("peer auth %T, want TLS", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber, nil
}

func clientTLS(ca *tlstest.CA, certs ...tls.Certificate) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: certs}))
}

func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "server CA")
	srv := ca.Server(t)
	cert, key := srv.Write(t, t.TempDir(), "tls")
	addr := tlsServer(t, TLSOptions{CertFile: cert, KeyFile: key})

	if serial, err := tlsCall(t, addr, clientTLS(ca)); err != nil || serial.Cmp(srv.Serial) != 0 {
		t.Fatalf("TLS client: serial %v, %v; want %v, nil", serial, err, srv.Serial)
	}
	if _, err := tlsCall(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
		t.Error("a plaintext client was served")
	}
	if _, err := tlsCall(t, addr, clientTLS(tlstest.NewCA(t, "another CA"))); err == nil {
		t.Error("a client that does not trust the server's CA connected")
	}
}

func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "client CA"), tlstest.NewCA(t, "other CA")
	cert, key := serverCA.Server(t).Write(t, dir, "tls")
	cas := clientCA.WriteCA(t, dir, "ca")
	addr := tlsServer(t, TLSOptions{CertFile: cert, KeyFile: key, ClientCAFile: cas,
		ClientSANs: []string{"spiffe://cluster.local/ns/edge/sa/envoy", "envoy.edge.svc"}})

	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"no certificate", nil, false},
		{"wrong SAN", []tls.Certificate{clientCA.Client(t, "other.edge.svc", "spiffe://cluster.local/ns/edge/sa/other").TLS(t)}, false},
		{"right SAN, other CA", []tls.Certificate{otherCA.Client(t, "spiffe://cluster.local/ns/edge/sa/envoy").TLS(t)}, false},
		{"right URI SAN", []tls.Certificate{clientCA.Client(t, "spiffe://cluster.local/ns/edge/sa/envoy").TLS(t)}, true},
		{"right DNS SAN", []tls.Certificate{clientCA.Client(t, "envoy.edge.svc").TLS(t)}, true},
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
	ca := tlstest.NewCA(t, "server CA")
	first := ca.Server(t)
	cert, key := first.Write(t, dir, "tls")
	addr := tlsServer(t, TLSOptions{CertFile: cert, KeyFile: key})

	open, err := grpc.NewClient(addr, clientTLS(ca))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	serialOf := func(cc *grpc.ClientConn) *big.Int {
		t.Helper()
		ctx, cancel := ctxTimeout(t)
		defer cancel()
		var p peer.Peer
		if _, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, someRequest, grpc.Peer(&p)); err != nil {
			t.Fatal(err)
		}
		return p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber
	}
	if s := serialOf(open); s.Cmp(first.Serial) != 0 {
		t.Fatalf("serial %v, want %v", s, first.Serial)
	}
	rotated, fixed := ca.Server(t), ca.Server(t)
	for _, step := range []struct {
		name   string
		change func()
		want   *big.Int
	}{
		{"rotated", func() { rotated.Write(t, dir, "tls") }, rotated.Serial},
		{"key of another certificate", func() { tlstest.WriteFile(t, key, ca.Server(t).KeyPEM) }, rotated.Serial},
		{"half-written", func() { tlstest.WriteFile(t, cert, []byte("-----BEGIN CERTIFICATE-----\nMIIB")) }, rotated.Serial},
		{"fixed", func() { fixed.Write(t, dir, "tls") }, fixed.Serial},
	} {
		step.change()
		if s, err := tlsCall(t, addr, clientTLS(ca)); err != nil || s.Cmp(step.want) != 0 {
			t.Errorf("%s: a new connection got serial %v, %v; want %v", step.name, s, err, step.want)
		}
	}
	if s := serialOf(open); s.Cmp(first.Serial) != 0 {
		t.Errorf("the connection opened first now has serial %v, want %v still", s, first.Serial)
	}
}

func ctxTimeout(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 10*time.Second)
}
