// Package h2grpc serves unary gRPC methods over plaintext HTTP/2 (h2c with
// prior knowledge, as Envoy and grpc-go speak it) at a fraction of
// grpc-go's CPU per call, for Portero's rate limit service behind a proxy on
// the same host.
//
// It keeps what a unary call needs: golang.org/x/net/http2's Framer and
// hpack, one reader and one writer goroutine per connection (the writer
// sends every answer ready at that moment in one system call) and a pool of
// workers for the handlers. bench/rls_test.go measures it beside grpc-go.
//
// Left out, compared with grpc-go: TLS (so Serve takes only loopback TCP and
// unix sockets), streaming methods, compression (grpc-encoding other than
// identity is answered UNIMPLEMENTED), interceptors, metadata and stats
// handlers. Compared with HTTP/2: HTTP/1.1 and upgrades, server push,
// priorities (parsed, not used) and requests that are not gRPC calls, which
// get 405 or 415 and a line of text. Protocol errors are answered as RFC
// 9113 says; h2spec's whole suite passes (h2spec_test.go).
//
// What a client can make it hold is bounded: streams (MaxConcurrentStreams,
// counted until the answer is queued), message and header sizes, request
// bytes buffered per connection, answer bytes queued for the socket and for
// a peer that does not read; and time (HandshakeTimeout, IdleTimeout,
// MaxConnectionAge, PingMinInterval). A cap on connections belongs to the
// listener.
package h2grpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Handler answers one unary call: msg is the request message (valid only
// until the handler returns), the response message is appended to out and
// returned. An error is answered as its gRPC status (status.FromError), so
// handlers return status.Error(code, msg); any other error is UNKNOWN.
type Handler func(ctx context.Context, msg, out []byte) ([]byte, error)

// Options bound the server. The zero value is usable.
type Options struct {
	// MaxConcurrentStreams is advertised in SETTINGS and enforced: calls
	// beyond it are refused with REFUSED_STREAM, which clients retry. A
	// call counts until its answer is queued, or its handler returns.
	// 0 means 1024.
	MaxConcurrentStreams uint32
	// MaxRecvMsgSize bounds a request message; larger ones are answered
	// RESOURCE_EXHAUSTED. 0 means 4 MiB, grpc-go's default. The request
	// bytes one connection buffers are bounded by the larger of 64 MiB and
	// 4 × MaxRecvMsgSize; a call past that is RESOURCE_EXHAUSTED too.
	MaxRecvMsgSize int
	// MaxHeaderListSize bounds a request's decoded headers (SETTINGS
	// MAX_HEADER_LIST_SIZE); larger ones get HTTP 431. 0 means 16 KiB.
	MaxHeaderListSize uint32
	// Workers is the number of goroutines kept to run handlers; when all
	// are busy a call gets a goroutine of its own, so a slow handler never
	// queues the others. 0 means 16 per GOMAXPROCS.
	Workers int
	// HandshakeTimeout bounds the connection preface and the client's
	// first SETTINGS. 0 means 10 s.
	HandshakeTimeout time.Duration
	// IdleTimeout ends a connection that has had no call in flight for
	// that long: GOAWAY, then close. 0 means never.
	IdleTimeout time.Duration
	// MaxConnectionAge ends a connection once it is that old, ±10% at
	// random so that connections opened together do not all go at once:
	// GOAWAY, and the calls in flight are answered. 0 means never.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is how long calls in flight may still take
	// after the GOAWAY of MaxConnectionAge; then the connection is closed.
	// 0 means until they finish.
	MaxConnectionAgeGrace time.Duration
	// PingMinInterval is the shortest time the client may leave between
	// two PINGs, as grpc-go's keepalive.EnforcementPolicy.MinTime: the
	// third PING too soon, with no answer sent since, ends the connection
	// with GOAWAY ENHANCE_YOUR_CALM "too_many_pings", as grpc-go does.
	// 0 means pings are answered however often they come.
	PingMinInterval time.Duration
	// Logger receives connection errors at debug level; nil means
	// slog.Default().
	Logger *slog.Logger
}

const (
	defaultMaxStreams    = 1024
	defaultMaxRecvMsg    = 4 << 20
	defaultMaxHeaderList = 16 << 10
	// The receive windows granted per stream and for the connection: a
	// request is consumed as it arrives, so large ones only save round trips.
	recvWindow     = 1 << 20
	connRecvWindow = 16 << 20
	// maxPendingWrite bounds the bytes queued for a peer that does not
	// read (answers, acknowledgements); past it the connection is closed.
	maxPendingWrite = 8 << 20
	// minConnRecvBuffer bounds the request bytes one connection buffers
	// (see MaxRecvMsgSize), lest a client pin MaxConcurrentStreams ×
	// MaxRecvMsgSize (4 GiB) by never ending its requests.
	minConnRecvBuffer = 64 << 20
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("h2grpc: server closed")

// ErrNotLoopback is returned by Serve for a listener on a TCP address that
// is not a loopback address.
var ErrNotLoopback = errors.New("h2grpc: serves only loopback TCP addresses and unix sockets: it has no TLS and trusts its peers to be local")

// CheckLocal returns ErrNotLoopback, wrapped with the address, when addr
// is a TCP address that is not loopback (an unspecified address such as
// ":8081" included); unix sockets and other non-TCP listeners are local.
func CheckLocal(addr net.Addr) error {
	if !strings.HasPrefix(addr.Network(), "tcp") {
		return nil
	}
	var ip net.IP
	if ta, ok := addr.(*net.TCPAddr); ok {
		ip = ta.IP
	} else if host, _, err := net.SplitHostPort(addr.String()); err == nil {
		ip = net.ParseIP(host)
	}
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%w; %s is not", ErrNotLoopback, addr)
	}
	return nil
}

// Server serves the registered handlers on any number of listeners.
type Server struct {
	opts     Options
	handlers map[string]Handler
	maxHeld  int // request bytes a connection may buffer

	work      chan *stream
	quit      chan struct{} // closed once, by stopWorkers, to end the workers
	startOnce sync.Once
	stopOnce  sync.Once

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   bool
	connsDone chan struct{} // closed when closing and conns is empty
}

// NewServer returns a server with no handlers.
func NewServer(o Options) *Server {
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = defaultMaxStreams
	}
	if o.MaxRecvMsgSize <= 0 {
		o.MaxRecvMsgSize = defaultMaxRecvMsg
	}
	if o.MaxHeaderListSize == 0 {
		o.MaxHeaderListSize = defaultMaxHeaderList
	}
	if o.Workers <= 0 {
		o.Workers = 16 * runtime.GOMAXPROCS(0)
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Server{
		opts:      o,
		maxHeld:   max(minConnRecvBuffer, 4*(o.MaxRecvMsgSize+5)),
		handlers:  map[string]Handler{},
		work:      make(chan *stream),
		quit:      make(chan struct{}),
		listeners: map[net.Listener]struct{}{},
		conns:     map[*conn]struct{}{},
		connsDone: make(chan struct{}),
	}
}

// Handle registers h for the full method name, "/package.Service/Method".
// It must be called before Serve.
func (s *Server) Handle(method string, h Handler) { s.handlers[method] = h }

// Serve accepts connections on lis until Shutdown or Close, and returns
// ErrServerClosed then, or the listener's error. It refuses (and closes) a
// listener on a TCP address that is not loopback: see CheckLocal.
func (s *Server) Serve(lis net.Listener) error {
	if err := CheckLocal(lis.Addr()); err != nil {
		lis.Close()
		return err
	}
	s.startOnce.Do(s.startWorkers)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		lis.Close()
		return ErrServerClosed
	}
	s.listeners[lis] = struct{}{}
	s.mu.Unlock()
	var backoff time.Duration
	for {
		nc, err := lis.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() { // still registered: Close closes it
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			s.mu.Lock()
			delete(s.listeners, lis)
			s.mu.Unlock()
			return err
		}
		backoff = 0
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		go c.serve()
	}
}

// Handlers run on a pool of worker goroutines that grows when every worker
// is busy and shrinks when they stay idle: a new goroutine per call would
// grow its stack to the handler's depth every time.
const workerIdle = 10 * time.Second

func (s *Server) startWorkers() {
	for range s.opts.Workers {
		go s.worker(nil, true)
	}
}

// worker runs st, if any, then every call handed to it; a worker that is
// not permanent exits after workerIdle without work.
func (s *Server) worker(st *stream, permanent bool) {
	var idle <-chan time.Time
	var t *time.Timer
	if !permanent {
		t = time.NewTimer(workerIdle)
		defer t.Stop()
		idle = t.C
	}
	for {
		if st != nil {
			st.run()
		}
		if t != nil {
			t.Reset(workerIdle)
		}
		select {
		case st = <-s.work:
		case <-idle:
			return
		case <-s.quit:
			return
		}
	}
}

// dispatch runs st on an idle worker, or on a new worker when every worker
// is busy, so that a slow handler never queues the others.
func (s *Server) dispatch(st *stream) {
	select {
	case s.work <- st:
	default:
		go s.worker(st, false)
	}
}

// Shutdown stops accepting connections, sends GOAWAY on every connection
// (calls already received are answered, later ones are refused so that
// clients retry them elsewhere) and waits until every connection has
// finished or ctx is done; then it closes what is left. It returns ctx's
// error when it had to cut calls short.
func (s *Server) Shutdown(ctx context.Context) error {
	for _, c := range s.beginClose() {
		c.goAway()
	}
	select {
	case <-s.connsDone:
		s.stopWorkers()
		return nil
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
}

// Close closes every listener and connection at once; calls in flight see
// their context cancelled and their answers are dropped.
func (s *Server) Close() error {
	for _, c := range s.beginClose() {
		c.nc.Close()
	}
	s.stopWorkers()
	return nil
}

// stopWorkers ends the permanent workers (and idle others); Shutdown and
// Close may both call it, any number of times and concurrently.
func (s *Server) stopWorkers() { s.stopOnce.Do(func() { close(s.quit) }) }

// beginClose marks the server closing, closes its listeners and returns
// its connections.
func (s *Server) beginClose() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closing {
		s.closing = true
		for lis := range s.listeners {
			lis.Close()
		}
		if len(s.conns) == 0 {
			close(s.connsDone)
		}
	}
	return slices.Collect(maps.Keys(s.conns))
}

// forget removes a finished connection.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if s.closing && len(s.conns) == 0 {
		select {
		case <-s.connsDone:
		default:
			close(s.connsDone)
		}
	}
}

// errorStatus is the gRPC status of a handler's error.
func errorStatus(err error) (codes.Code, string) {
	if st, ok := status.FromError(err); ok {
		return st.Code(), st.Message()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, err.Error()
	case errors.Is(err, context.Canceled):
		return codes.Canceled, err.Error()
	}
	return codes.Unknown, err.Error()
}
