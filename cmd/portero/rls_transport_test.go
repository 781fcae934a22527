package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/testenv"
)

// The gRPC transport flags: bad values are usage errors; the lean
// transport refuses an address that is not loopback; both transports serve
// a unix socket that `portero check` reaches.
func TestRLSTransportFlags(t *testing.T) {
	base := []string{"rls", "--config", "../../examples/envoy/config", "--http-listen", "off", "--grpc-listen", "127.0.0.1:0", "--admin-listen", "off"}
	for _, extra := range [][]string{
		{"--grpc-socket-mode", "999"},
		{"--grpc-tls-cert", "cert.pem"},
		{"--grpc-tls-cert", "cert.pem", "--grpc-tls-key", "key.pem", "--grpc-transport", "lean"},
		{"--grpc-tls-client-san", "envoy.svc"},
		{"--grpc-tls-cert", "/nonexistent/cert.pem", "--grpc-tls-key", "/nonexistent/key.pem"},
		{"--grpc-handshake-timeout", "-1s"},
	} {
		err := run(context.Background(), append(base, extra...), io.Discard, io.Discard)
		if exitCode(err) != 2 {
			t.Errorf("%v: %v (exit %d), want a usage error", extra, err, exitCode(err))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, []string{"rls", "--config", "../../examples/envoy/config", "--http-listen", "off", "--grpc-transport", "lean", "--grpc-listen", "0.0.0.0:0", "--admin-listen", "off"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "loopback") || ctx.Err() != nil {
		t.Errorf("lean on 0.0.0.0: %v, want a refusal naming loopback at once", err)
	}

	for _, transport := range []string{"grpc-go", "lean"} {
		t.Run("unix-"+transport, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "rls.sock")
			ctx, cancel := context.WithCancel(context.Background())
			out, errOut := &testenv.Buffer{}, &testenv.Buffer{}
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"rls", "--config", "../../examples/envoy/config", "--http-listen", "off", "--log-level", "warn",
					"--grpc-transport", transport, "--grpc-listen", "unix:" + sock, "--admin-listen", "off"}, out, errOut)
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("portero rls: %v; stderr: %s", err, errOut)
				}
			}()
			for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "gRPC listening on grpc://unix://"+sock); {
				if time.Now().After(deadline) {
					t.Fatalf("portero rls did not start on the socket; stdout: %s stderr: %s", out, errOut)
				}
				time.Sleep(10 * time.Millisecond)
			}
			res, err := runCheck(t, "--server", "grpc://unix://"+sock, "--domain", "edge", "-d", "remote_address=10.9.9.9")
			if err != nil || !strings.HasPrefix(res, "OK") {
				t.Fatalf("check over the socket: %v\n%s", err, res)
			}
		})
	}
}
