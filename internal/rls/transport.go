package rls

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/portero-rl/portero/internal/h2grpc"
	"github.com/portero-rl/portero/internal/tlsreload"
)

// Transport names one of the two gRPC servers of the rate limit service.
type Transport string

const (
	// TransportGRPC is google.golang.org/grpc: TLS and mTLS, every method
	// (health Watch, server reflection), any address. The default.
	TransportGRPC Transport = "grpc-go"
	// TransportLean is internal/h2grpc: ShouldRateLimit and health Check
	// only, plaintext, on loopback TCP addresses and unix sockets only, at
	// a fraction of grpc-go's CPU per call (docs/benchmarks-rls.md).
	TransportLean Transport = "lean"
)

// Defaults of ServerOptions, for the zero value of each field.
const (
	DefaultMaxConnections        = 4096
	DefaultMaxConcurrentStreams  = 1024
	DefaultHandshakeTimeout      = 10 * time.Second
	DefaultIdleTimeout           = 30 * time.Minute
	DefaultMaxConnectionAge      = 24 * time.Hour // envoyproxy/ratelimit's GRPC_MAX_CONNECTION_AGE
	DefaultMaxConnectionAgeGrace = time.Hour      // and GRPC_MAX_CONNECTION_AGE_GRACE
	DefaultKeepaliveMinTime      = 10 * time.Second
	DefaultKeepaliveTime         = 2 * time.Hour // grpc-go's
	DefaultKeepaliveTimeout      = 20 * time.Second
	DefaultMaxRecvMsgSize        = 4 << 20
	DefaultShutdownGrace         = 5 * time.Second
	DefaultSocketMode            = os.FileMode(0o660)
)

// maxHeaderListSize bounds a request's headers on both transports: Envoy
// sends a dozen small ones.
const maxHeaderListSize = 16 << 10

// ServerOptions configure the gRPC server of the rate limit service, on
// either transport. The zero value of each field means its default (the
// Default constants), which is safe for a server reachable by untrusted
// clients; durations marked "negative: never" turn a limit off. What each
// limit does on the wire is in docs/envoy.md.
type ServerOptions struct {
	// Transport picks the server; TransportGRPC when empty.
	Transport Transport
	// TLS serves TLS, and with a client CA mTLS (grpc-go only); off when
	// its CertFile is empty.
	TLS TLSOptions
	// MaxConnections caps the open connections of the server (on all its
	// listeners): one accepted beyond the cap is closed at once, so that
	// the client tries another replica instead of waiting. Negative: no
	// cap.
	MaxConnections int
	// MaxConcurrentStreams caps the calls in flight on one connection
	// (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused with
	// REFUSED_STREAM, which clients retry.
	MaxConcurrentStreams uint32
	// HandshakeTimeout bounds the TLS handshake and the HTTP/2 preface of
	// a new connection.
	HandshakeTimeout time.Duration
	// IdleTimeout ends (GOAWAY, then close) a connection that has had no
	// call in flight for that long. Negative: never.
	IdleTimeout time.Duration
	// MaxConnectionAge ends a connection once it is that old, ±10%: GOAWAY,
	// so that the client reconnects (and a load balancer spreads it
	// again), while calls in flight finish. Negative: never.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is how long calls in flight may take after the
	// GOAWAY of MaxConnectionAge before the connection is closed.
	// Negative: until they finish.
	MaxConnectionAgeGrace time.Duration
	// KeepaliveMinTime is the shortest interval between a client's PINGs
	// (grpc-go's keepalive.EnforcementPolicy.MinTime, PINGs on idle
	// connections permitted): a client pinging more often gets GOAWAY
	// ENHANCE_YOUR_CALM "too_many_pings" on its third offence. Clients
	// must set their keepalive time at or above it (Envoy's
	// connection_keepalive interval).
	KeepaliveMinTime time.Duration
	// KeepaliveTime and KeepaliveTimeout: grpc-go pings a connection that
	// has been silent for KeepaliveTime and closes it when no answer comes
	// within KeepaliveTimeout, to find peers that vanished. The lean
	// transport relies on TCP keepalive (Go's default, 15 s) instead.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MaxRecvMsgSize bounds one request message, in bytes.
	MaxRecvMsgSize int
	// ShutdownGrace is how long Serve lets calls in flight finish when its
	// context ends, before it closes every connection.
	ShutdownGrace time.Duration
	// SocketMode is the permission of a unix socket created by Listen.
	SocketMode os.FileMode
	// GRPCOptions are added to grpc-go's (a stats handler for tracing);
	// the lean transport has none.
	GRPCOptions []grpc.ServerOption
}

// withDefaults fills the zero fields and checks the others.
func (o ServerOptions) withDefaults() (ServerOptions, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.Transport == "" {
		o.Transport = TransportGRPC
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	def(&o.HandshakeTimeout, DefaultHandshakeTimeout)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.MaxConnectionAge, DefaultMaxConnectionAge)
	def(&o.MaxConnectionAgeGrace, DefaultMaxConnectionAgeGrace)
	def(&o.KeepaliveMinTime, DefaultKeepaliveMinTime)
	def(&o.KeepaliveTime, DefaultKeepaliveTime)
	def(&o.KeepaliveTimeout, DefaultKeepaliveTimeout)
	def(&o.ShutdownGrace, DefaultShutdownGrace)
	if o.MaxRecvMsgSize == 0 {
		o.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if o.SocketMode == 0 {
		o.SocketMode = DefaultSocketMode
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("rls: "+format, a...)) }
	switch o.Transport {
	case TransportGRPC:
	case TransportLean:
		if o.TLS.Enabled() {
			bad("transport %q: no TLS on the lean transport (it serves loopback and unix sockets only); use %q", o.Transport, TransportGRPC)
		}
	default:
		bad("transport %q: want %q or %q", o.Transport, TransportGRPC, TransportLean)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"handshake timeout", o.HandshakeTimeout}, {"keepalive min time", o.KeepaliveMinTime},
		{"keepalive time", o.KeepaliveTime}, {"keepalive timeout", o.KeepaliveTimeout}, {"shutdown grace", o.ShutdownGrace},
	} {
		if d.v < 0 {
			bad("%s %v: must be positive", d.name, d.v)
		}
	}
	if o.MaxRecvMsgSize < 0 {
		bad("max message size %d: must be positive", o.MaxRecvMsgSize)
	}
	if o.SocketMode&^os.ModePerm != 0 {
		bad("socket mode %v: only permission bits", o.SocketMode)
	}
	if err := validateTLS(o.TLS); err != nil {
		errs = append(errs, err)
	}
	return o, errors.Join(errs...)
}

// never maps "negative: never" onto the 0 that grpc-go and h2grpc read as
// never.
func never(d time.Duration) time.Duration { return max(d, 0) }

// Server is the rate limit service on one transport: NewServer, then Serve
// on any number of listeners, then Shutdown. Serve (the function) does all
// three.
type Server struct {
	opts  ServerOptions
	svc   *Service
	conns chan struct{} // a token per open connection; nil without a cap

	grpc       *grpc.Server
	health     *health.Server
	lean       *h2grpc.Server
	leanHealth *leanHealthState
}

// NewServer returns the server of svc with options o: ShouldRateLimit,
// the gRPC health service (SERVING for "", ServiceName and HealthName) and, on
// grpc-go, server reflection. It reads the TLS files now, so that a wrong
// path or a bad key is an error at start-up naming the file.
func NewServer(svc *Service, o ServerOptions) (*Server, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o, svc: svc}
	if o.MaxConnections > 0 {
		s.conns = make(chan struct{}, o.MaxConnections)
	}
	if o.Transport == TransportLean {
		s.lean, s.leanHealth = newLeanServer(svc, h2grpc.Options{
			MaxConcurrentStreams:  o.MaxConcurrentStreams,
			MaxRecvMsgSize:        o.MaxRecvMsgSize,
			MaxHeaderListSize:     maxHeaderListSize,
			HandshakeTimeout:      o.HandshakeTimeout,
			IdleTimeout:           never(o.IdleTimeout),
			MaxConnectionAge:      never(o.MaxConnectionAge),
			MaxConnectionAgeGrace: never(o.MaxConnectionAgeGrace),
			PingMinInterval:       o.KeepaliveMinTime,
			Logger:                svc.opts.Logger,
		})
		return s, nil
	}
	gopts := []grpc.ServerOption{
		// A pool of stream workers, so that most calls run on a goroutine
		// whose stack has already grown instead of a new goroutine per
		// stream (gRPC still starts one when every worker is busy, so a
		// slow store never queues calls).
		grpc.NumStreamWorkers(uint32(16 * runtime.GOMAXPROCS(0))),
		grpc.MaxConcurrentStreams(o.MaxConcurrentStreams),
		grpc.ConnectionTimeout(o.HandshakeTimeout),
		grpc.MaxRecvMsgSize(o.MaxRecvMsgSize),
		grpc.MaxHeaderListSize(maxHeaderListSize),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: o.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     never(o.IdleTimeout),
			MaxConnectionAge:      never(o.MaxConnectionAge),
			MaxConnectionAgeGrace: never(o.MaxConnectionAgeGrace),
			Time:                  o.KeepaliveTime,
			Timeout:               o.KeepaliveTimeout,
		}),
	}
	if o.TLS.Enabled() {
		r, err := tlsreload.New(o.TLS, svc.opts.Logger)
		if err != nil {
			return nil, fmt.Errorf("rls: TLS: %w", err)
		}
		// grpc-go's credentials add h2 to what each handshake gets.
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(r.ServerConfig())))
	}
	gopts = append(gopts, grpc.ForceServerCodecV2(wireCodec{}))
	s.grpc = grpc.NewServer(append(gopts, o.GRPCOptions...)...)
	s.grpc.RegisterService(&wireServiceDesc, svc)
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(HealthName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	return s, nil
}

// Options returns the server's options, defaults filled in.
func (s *Server) Options() ServerOptions { return s.opts }

// Serve accepts connections on lis until Shutdown or Close, then returns
// nil; or the listener's error. The lean transport refuses a listener on
// a TCP address that is not loopback (h2grpc.ErrNotLoopback).
func (s *Server) Serve(lis net.Listener) error {
	if s.lean != nil {
		if err := h2grpc.CheckLocal(lis.Addr()); err != nil {
			lis.Close()
			return fmt.Errorf("rls: transport %q: %w; use %q (with TLS) for other addresses", TransportLean, err, TransportGRPC)
		}
	}
	if s.conns != nil {
		lis = &capListener{Listener: lis, tokens: s.conns, srv: s}
	}
	var err error
	if s.lean != nil {
		err = s.lean.Serve(lis)
		if errors.Is(err, h2grpc.ErrServerClosed) {
			err = nil
		}
	} else {
		err = s.grpc.Serve(lis)
		if errors.Is(err, grpc.ErrServerStopped) {
			err = nil
		}
	}
	return err
}

// Shutdown stops the server gracefully: health turns NOT_SERVING, the
// listeners close, every connection gets GOAWAY and calls in flight may
// finish until ctx is done; then every connection is closed. It returns
// ctx's error when it had to cut calls short.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.lean != nil {
		s.leanHealth.Shutdown()
		return s.lean.Shutdown(ctx)
	}
	s.health.Shutdown()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		return ctx.Err()
	}
}

// Close stops the server at once: listeners and connections are closed,
// calls in flight are cancelled.
func (s *Server) Close() {
	if s.lean != nil {
		s.lean.Close()
		return
	}
	s.grpc.Stop()
}

// Serve runs svc on lis with options o until ctx is done, then shuts down
// within o.ShutdownGrace. It returns nil after a shutdown caused by ctx,
// or the error that stopped serving (a bad option, a listener that
// failed, a non-loopback address for the lean transport).
func Serve(ctx context.Context, lis net.Listener, svc *Service, o ServerOptions) error {
	s, err := NewServer(svc, o)
	if err != nil {
		lis.Close()
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(lis) }()
	select {
	case err := <-errc:
		// The listener failed: end the connections it left too.
		s.Close()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownGrace)
	defer cancel()
	s.Shutdown(sctx)
	return <-errc
}

// Listen opens the listener of addr: "unix:PATH" (or "unix://PATH") for a
// unix socket at PATH with permission mode (0 means DefaultSocketMode),
// anything else a TCP host:port. A stale socket file left by a process
// that died is replaced; one that a live server answers on is an error.
func Listen(addr string, mode os.FileMode) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return net.Listen("tcp", addr)
	}
	path = strings.TrimPrefix(path, "//")
	if path == "" {
		return nil, fmt.Errorf("rls: listen %q: no socket path", addr)
	}
	if mode == 0 {
		mode = DefaultSocketMode
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("rls: listen %q: another server is listening on that socket", addr)
		}
		os.Remove(path)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		lis.Close()
		return nil, fmt.Errorf("rls: listen %q: %w", addr, err)
	}
	return lis, nil
}

// capListener closes the connections it accepts beyond the server's cap
// at once, so that a client tries elsewhere rather than wait in the
// listen queue; each connection it hands out gives its token back when
// closed.
type capListener struct {
	net.Listener
	tokens chan struct{}
	srv    *Server
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.tokens <- struct{}{}:
			return &cappedConn{Conn: c, tokens: l.tokens}, nil
		default:
			l.srv.svc.opts.Logger.Debug("rls: connection refused: at the connection cap", "remote", c.RemoteAddr().String(), "max", cap(l.tokens))
			c.Close()
		}
	}
}

// cappedConn holds one token of the cap until it is closed.
type cappedConn struct {
	net.Conn
	tokens chan struct{}
	once   sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.tokens })
	return err
}

// CloseWrite half-closes the connection when the underlying one can (TCP,
// unix): the lean transport ends a connection that way, so that the client
// reads the last frames before it sees the end.
func (c *cappedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// SetServing sets the gRPC health of HealthName and ServiceName; ""
// stays SERVING, as envoyproxy/ratelimit's does. Its
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED turns them NOT_SERVING while no
// configuration with a domain is loaded. After Drain or Shutdown it
// changes nothing.
func (s *Server) SetServing(serving bool) {
	if s.lean != nil {
		s.leanHealth.setNamed(serving)
		return
	}
	st := healthpb.HealthCheckResponse_SERVING
	if !serving {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus(ServiceName, st)
	s.health.SetServingStatus(HealthName, st)
}

// Drain turns health NOT_SERVING while the server goes on serving: the
// start of a drain, so that health checks send clients elsewhere before
// Shutdown sends GOAWAY.
func (s *Server) Drain() {
	if s.lean != nil {
		s.leanHealth.Shutdown()
		return
	}
	s.health.Shutdown()
}
