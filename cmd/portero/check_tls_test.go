package main

import (
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/tlstest"
)

// TestCheckTLS: `portero check` asks a server that serves gRPC and HTTP
// over TLS and requires client certificates (mTLS): with the server's CA
// and a client certificate it gets the answer over grpcs:// and https://;
// without the CA (the system's do not sign the test's server) or without
// a client certificate no answer comes (exit 3); TLS flags on a plaintext
// server and a certificate without its key are usage errors (exit 2).
func TestCheckTLS(t *testing.T) {
	dir := t.TempDir()
	ca, clients := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "client CA")
	srvCert, srvKey := ca.Server(t).Write(t, dir, "server")
	clientCA := clients.WriteCA(t, dir, "clients")
	serverCA := ca.WriteCA(t, dir, "servers")
	cliCert, cliKey := clients.Client(t, "ops").Write(t, dir, "ops")
	otherCert, otherKey := tlstest.NewCA(t, "stranger").Client(t, "stranger").Write(t, dir, "stranger")

	g, h := startRLS(t, "--grpc-transport", "grpc-go",
		"--grpc-tls-cert", srvCert, "--grpc-tls-key", srvKey, "--grpc-tls-client-ca", clientCA,
		"--http-tls-cert", srvCert, "--http-tls-key", srvKey, "--http-tls-client-ca", clientCA)
	ask := []string{"--domain", "edge", "-d", "api_key=k,plan=gold;hits=0"}
	for _, server := range []string{"grpcs://" + g, "https://" + h} {
		t.Run(strings.SplitN(server, ":", 2)[0], func(t *testing.T) {
			out, err := runCheck(t, append([]string{"--server", server, "--tls-ca", serverCA, "--tls-cert", cliCert, "--tls-key", cliKey}, ask...)...)
			if err != nil || !strings.HasPrefix(out, "OK") {
				t.Fatalf("with the CA and a client certificate: %v\n%s", err, out)
			}
			// The name checked is the host's unless told: the certificate
			// names localhost and 127.0.0.1, not this.
			out, err = runCheck(t, append([]string{"--server", server, "--tls-ca", serverCA, "--tls-cert", cliCert, "--tls-key", cliKey,
				"--tls-server-name", "rls.example"}, ask...)...)
			if exitCode(err) != 3 {
				t.Errorf("a server name the certificate does not carry: exit %d, want 3\n%s", exitCode(err), out)
			}
			for name, args := range map[string][]string{
				"without the server's CA":                {"--tls-cert", cliCert, "--tls-key", cliKey},
				"without a client certificate":           {"--tls-ca", serverCA},
				"with a certificate the CA did not sign": {"--tls-ca", serverCA, "--tls-cert", otherCert, "--tls-key", otherKey},
			} {
				out, err := runCheck(t, append(append([]string{"--server", server}, args...), ask...)...)
				if exitCode(err) != 3 || strings.HasPrefix(out, "OK") {
					t.Errorf("%s: exit %d, want 3 (no answer)\n%s", name, exitCode(err), out)
				}
			}
		})
	}
	for name, args := range map[string][]string{
		"TLS flags on a plaintext server": {"--server", "grpc://" + g, "--tls-ca", serverCA},
		"a certificate without its key":   {"--server", "grpcs://" + g, "--tls-cert", cliCert},
		"a CA file that is no PEM":        {"--server", "grpcs://" + g, "--tls-ca", srvKey + ".missing"},
	} {
		out, err := runCheck(t, append(args, ask...)...)
		if exitCode(err) != 2 || !strings.Contains(out, "--tls-") {
			t.Errorf("%s: exit %d, want 2 with the flag named\n%s", name, exitCode(err), out)
		}
	}
}
