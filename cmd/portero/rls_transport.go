package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/portero-rl/portero/internal/rls"
)

// transportFlags are the gRPC server options of `portero rls`: one flag
// per field of rls.ServerOptions, which holds their meaning and defaults.
type transportFlags struct {
	o          rls.ServerOptions
	transport  string
	socketMode string
}

func addTransportFlags(fl *pflag.FlagSet) *transportFlags {
	t := &transportFlags{}
	o := &t.o
	fl.StringVar(&t.transport, "grpc-transport", string(rls.TransportGRPC), "gRPC server: grpc-go (TLS, reflection, health Watch, any address) or lean (ShouldRateLimit and health Check only, plaintext, loopback and unix sockets only, a fraction of grpc-go's CPU per call)")
	fl.StringVar(&o.TLS.CertFile, "grpc-tls-cert", "", "PEM certificate chain: serve TLS (reloaded when the file changes)")
	fl.StringVar(&o.TLS.KeyFile, "grpc-tls-key", "", "PEM private key of --grpc-tls-cert")
	fl.StringVar(&o.TLS.ClientCAFile, "grpc-tls-client-ca", "", "PEM CA certificates: require client certificates they signed (mTLS)")
	fl.StringSliceVar(&o.TLS.ClientSANs, "grpc-tls-client-san", nil, "with --grpc-tls-client-ca, admit only client certificates with one of these DNS or URI SANs (repeatable, comma-separated)")
	fl.IntVar(&o.MaxConnections, "grpc-max-connections", rls.DefaultMaxConnections, "open gRPC connections at most; more are closed at once (-1: no cap)")
	fl.Uint32Var(&o.MaxConcurrentStreams, "grpc-max-concurrent-streams", rls.DefaultMaxConcurrentStreams, "calls in flight per connection at most")
	fl.DurationVar(&o.HandshakeTimeout, "grpc-handshake-timeout", rls.DefaultHandshakeTimeout, "longest TLS handshake and HTTP/2 preface of a new connection")
	fl.DurationVar(&o.IdleTimeout, "grpc-idle-timeout", rls.DefaultIdleTimeout, "close a connection without calls for this long (-1s: never)")
	fl.DurationVar(&o.MaxConnectionAge, "grpc-max-connection-age", rls.DefaultMaxConnectionAge, "send GOAWAY to a connection this old, ±10% (-1s: never; envoyproxy/ratelimit's GRPC_MAX_CONNECTION_AGE)")
	fl.DurationVar(&o.MaxConnectionAgeGrace, "grpc-max-connection-age-grace", rls.DefaultMaxConnectionAgeGrace, "then close it after this long (-1s: when its calls end; GRPC_MAX_CONNECTION_AGE_GRACE)")
	fl.DurationVar(&o.KeepaliveMinTime, "grpc-keepalive-min-time", rls.DefaultKeepaliveMinTime, "shortest interval between a client's pings; more often is GOAWAY too_many_pings")
	fl.StringVar(&t.socketMode, "grpc-socket-mode", "0660", "permissions of the socket with --grpc-listen unix:PATH, octal")
	return t
}

// options returns the server options the flags say, with grace as the
// shutdown grace.
func (t *transportFlags) options(grace time.Duration) (rls.ServerOptions, error) {
	o := t.o
	o.Transport = rls.Transport(t.transport)
	o.ShutdownGrace = grace
	mode, err := strconv.ParseUint(t.socketMode, 8, 32)
	if err != nil || mode > 0o777 || mode == 0 {
		return o, fmt.Errorf("--grpc-socket-mode %q: want octal permissions such as 0660", t.socketMode)
	}
	o.SocketMode = os.FileMode(mode)
	return o, nil
}
