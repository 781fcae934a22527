package rls

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/h2grpc"
)

// The transports' limits with real grpc-go clients. Those that take time
// (keepalive enforcement, connection age, idle and handshake timeouts) run
// in a synctest bubble over net.Pipe connections, so that minutes pass in
// no time and the instants they check are exact; the others use loopback
// and unix sockets. Each runs on both transports unless it is about TLS.

// pipeNet is an in-memory network in the bubble: the server's listener,
// the client's dialer, and a log of the frames the server sent.
type pipeNet struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	dials atomic.Int32

	mu     sync.Mutex
	frames []frame
}

// frame is one HTTP/2 frame (or the end of a connection) that a client
// received, with the bubble instant it arrived.
type frame struct {
	at    time.Time
	conn  int32
	typ   http2.FrameType // 0xff: the connection ended
	code  http2.ErrCode   // GOAWAY
	debug string          // GOAWAY
	// SETTINGS_MAX_CONCURRENT_STREAMS, when a SETTINGS frame carries it.
	maxStreams uint32
}

const frameClosed = http2.FrameType(0xff)

func newPipeNet() *pipeNet {
	return &pipeNet{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeNet) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeNet) Close() error { l.once.Do(func() { close(l.done) }); return nil }

// Addr is a unix address: local, as the lean transport requires.
func (l *pipeNet) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "unix"} }

// raw returns the client end of a new connection.
func (l *pipeNet) raw(ctx context.Context) (net.Conn, error) {
	cli, srv := net.Pipe()
	select {
	case l.conns <- srv:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, net.ErrClosed
	}
	return cli, nil
}

// dial is the grpc-go client's dialer: a connection whose frames are
// logged.
func (l *pipeNet) dial(ctx context.Context, _ string) (net.Conn, error) {
	c, err := l.raw(ctx)
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, net: l, id: l.dials.Add(1)}, nil
}

// seen returns the frames of type typ logged so far.
func (l *pipeNet) seen(typ http2.FrameType) []frame {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []frame
	for _, f := range l.frames {
		if f.typ == typ {
			out = append(out, f)
		}
	}
	return out
}

// sniffConn parses the frames the server sends as the client reads them.
type sniffConn struct {
	net.Conn
	net    *pipeNet
	id     int32
	buf    []byte
	closed bool
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.buf = append(c.buf, p[:n]...)
	for len(c.buf) >= 9 {
		length := int(c.buf[0])<<16 | int(c.buf[1])<<8 | int(c.buf[2])
		if len(c.buf) < 9+length {
			break
		}
		f := frame{at: time.Now(), conn: c.id, typ: http2.FrameType(c.buf[3])}
		payload := c.buf[9 : 9+length]
		switch f.typ {
		case http2.FrameGoAway:
			if len(payload) >= 8 {
				f.code, f.debug = http2.ErrCode(binary.BigEndian.Uint32(payload[4:])), string(payload[8:])
			}
		case http2.FrameSettings:
			for s := payload; len(s) >= 6; s = s[6:] {
				if http2.SettingID(binary.BigEndian.Uint16(s)) == http2.SettingMaxConcurrentStreams {
					f.maxStreams = binary.BigEndian.Uint32(s[2:])
				}
			}
		}
		c.log(f)
		c.buf = c.buf[9+length:]
	}
	if err != nil && !c.closed {
		c.closed = true
		c.log(frame{at: time.Now(), conn: c.id, typ: frameClosed})
	}
	return n, err
}

func (c *sniffConn) log(f frame) {
	c.net.mu.Lock()
	c.net.frames = append(c.net.frames, f)
	c.net.mu.Unlock()
}

// holdStore is the memory store behind a gate: while held, calls wait in
// AllowAll (until released or their context ends), and the most waiting
// at once is recorded.
type holdStore struct {
	portero.Store
	mu       sync.Mutex
	gate     chan struct{} // nil: calls pass
	waiting  int
	mostWait int
}

func (s *holdStore) hold() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *holdStore) release() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

func (s *holdStore) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	s.mu.Lock()
	gate := s.gate
	if gate != nil {
		s.waiting++
		s.mostWait = max(s.mostWait, s.waiting)
	}
	s.mu.Unlock()
	if gate != nil {
		defer func() { s.mu.Lock(); s.waiting--; s.mu.Unlock() }()
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.AllowAll(ctx, now, hits)
}

// pipeServer runs a server of options o in the bubble, over a holdStore.
func pipeServer(t *testing.T, o ServerOptions) (*pipeNet, *holdStore) {
	t.Helper()
	c, err := envoyconf.Load(examples, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := &holdStore{Store: newMemStore(t)}
	comp, eng := newDoor(t, st, c, descriptor.Options{}, "")
	// Calls held for minutes of bubble time are not the store failing.
	s, err := NewServer(NewService(comp, eng, ServiceOptions{CallTimeout: 24 * time.Hour, Logger: quietLogger()}), o)
	if err != nil {
		t.Fatal(err)
	}
	l := newPipeNet()
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		st.release()
		s.Close()
		l.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return l, st
}

// pipeClient is a grpc-go client of the server behind l.
func pipeClient(t *testing.T, l *pipeNet, opts ...grpc.DialOption) pb.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///rls", append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(l.dial)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewRateLimitServiceClient(cc)
}

var someRequest = &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{
	{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.1.2.3"}}},
}}

// callAsync starts a call; its error arrives on the channel.
func callAsync(c pb.RateLimitServiceClient) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := c.ShouldRateLimit(context.Background(), someRequest)
		ch <- err
	}()
	return ch
}

// waitFrame advances the bubble a second at a time until a frame of type
// typ arrives on connection conn, or limit has passed; it returns the
// frame, or fails.
func waitFrame(t *testing.T, l *pipeNet, conn int32, typ http2.FrameType, limit time.Duration) frame {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		synctest.Wait()
		for _, f := range l.seen(typ) {
			if f.conn == conn {
				return f
			}
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("no frame of type %v on connection %d within %v", typ, conn, limit)
		}
		time.Sleep(time.Second)
	}
}

// Keepalive enforcement: a client whose keepalive time is below
// KeepaliveMinTime gets GOAWAY ENHANCE_YOUR_CALM "too_many_pings" (its
// first ping is free, the next three are strikes); one that keeps to it is
// never cut off.
func TestKeepaliveEnforcement(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		synctest.Test(t, func(t *testing.T) {
			l, _ := pipeServer(t, ServerOptions{Transport: Transport(transport), KeepaliveMinTime: time.Minute, IdleTimeout: -1})
			// grpc-go's client pings at most every 10 s.
			fast := pipeClient(t, l, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, PermitWithoutStream: true}))
			start := time.Now()
			if _, err := fast.ShouldRateLimit(t.Context(), someRequest); err != nil {
				t.Fatal(err)
			}
			ga := waitFrame(t, l, 1, http2.FrameGoAway, 5*time.Minute)
			if ga.code != http2.ErrCodeEnhanceYourCalm || ga.debug != "too_many_pings" {
				t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", ga.code, ga.debug)
			}
			// The client pings once after the first answer (its BDP
			// probe), then every 10 s: strikes at 10, 20 and 30 s, or
			// from 20 s when the server forgave the probe, as grpc-go
			// forgives the first ping after data it sent.
			if took := ga.at.Sub(start); took != 30*time.Second && took != 40*time.Second {
				t.Errorf("GOAWAY after %v, want 30s or 40s", took)
			}

			polite := pipeClient(t, l, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Minute, PermitWithoutStream: true}))
			if _, err := polite.ShouldRateLimit(t.Context(), someRequest); err != nil {
				t.Fatal(err)
			}
			id := l.dials.Load() // the polite client's connection
			// (Less than 30 minutes: then grpc-go's client channel goes
			// idle and closes its connection itself.)
			time.Sleep(20 * time.Minute)
			synctest.Wait()
			for _, typ := range []http2.FrameType{http2.FrameGoAway, frameClosed} {
				for _, f := range l.seen(typ) {
					if f.conn == id {
						t.Fatalf("a client pinging every KeepaliveMinTime saw %+v", f)
					}
				}
			}
			if _, err := polite.ShouldRateLimit(t.Context(), someRequest); err != nil {
				t.Fatalf("after 20 minutes of pings: %v", err)
			}
		})
	})
}

// Max connection age: GOAWAY NO_ERROR at the age ±10%, a call in flight on
// the old connection still completes and the next call goes to a new one;
// a call still running after the grace is cut off with the connection.
func TestMaxConnectionAge(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		for _, finishes := range []bool{true, false} {
			name := map[bool]string{true: "call-completes", false: "grace-expires"}[finishes]
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					l, st := pipeServer(t, ServerOptions{Transport: Transport(transport), MaxConnectionAge: time.Minute, MaxConnectionAgeGrace: 30 * time.Second})
					c := pipeClient(t, l)
					start := time.Now()
					if _, err := c.ShouldRateLimit(t.Context(), someRequest); err != nil {
						t.Fatal(err)
					}
					st.hold()
					inFlight := callAsync(c)
					ga := waitFrame(t, l, 1, http2.FrameGoAway, 2*time.Minute)
					if age := ga.at.Sub(start); ga.code != http2.ErrCodeNo || age < 54*time.Second || age > 66*time.Second {
						t.Fatalf("GOAWAY %v after %v, want NO_ERROR after 54 to 66 s", ga.code, age)
					}
					if finishes {
						time.Sleep(10 * time.Second)
						st.release()
						if err := <-inFlight; err != nil {
							t.Fatalf("the call in flight at the GOAWAY: %v, want it answered", err)
						}
						if _, err := c.ShouldRateLimit(t.Context(), someRequest); err != nil || l.dials.Load() != 2 {
							t.Fatalf("the next call: %v on %d connections, want a new connection", err, l.dials.Load())
						}
						return
					}
					err := <-inFlight
					end := waitFrame(t, l, 1, frameClosed, time.Minute)
					if status.Code(err) != codes.Unavailable {
						t.Errorf("the call past the grace: %v, want UNAVAILABLE", err)
					}
					// grpc-go closes through its writer, which may take
					// up to a second more.
					if grace := end.at.Sub(ga.at); grace < 30*time.Second || grace > 31*time.Second {
						t.Errorf("connection closed %v after the GOAWAY, want the 30s grace", grace)
					}
				})
			})
		}
	})
}

// Idle timeout: GOAWAY NO_ERROR and the end of the connection exactly
// IdleTimeout after its last call ended; a long call is not idleness.
func TestIdleTimeout(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		synctest.Test(t, func(t *testing.T) {
			l, st := pipeServer(t, ServerOptions{Transport: Transport(transport), IdleTimeout: 5 * time.Minute})
			c := pipeClient(t, l)
			st.hold()
			held := callAsync(c)
			time.Sleep(20 * time.Minute)
			synctest.Wait()
			if gs := l.seen(http2.FrameGoAway); len(gs) > 0 {
				t.Fatalf("GOAWAY while a call was in flight: %+v", gs)
			}
			st.release()
			if err := <-held; err != nil {
				t.Fatal(err)
			}
			ended := time.Now()
			ga := waitFrame(t, l, 1, http2.FrameGoAway, 10*time.Minute)
			if ga.code != http2.ErrCodeNo || ga.at.Sub(ended) != 5*time.Minute {
				t.Fatalf("GOAWAY %v %v after the last call, want NO_ERROR after 5m", ga.code, ga.at.Sub(ended))
			}
			if end := waitFrame(t, l, 1, frameClosed, time.Minute); end.at != ga.at {
				t.Errorf("closed %v after the GOAWAY, want at once", end.at.Sub(ga.at))
			}
			if _, err := c.ShouldRateLimit(t.Context(), someRequest); err != nil || l.dials.Load() != 2 {
				t.Fatalf("after the idle close: %v on %d connections, want a new connection", err, l.dials.Load())
			}
		})
	})
}

// Max concurrent streams: advertised, and never more calls in flight on
// one connection; the client queues the rest and every call completes.
func TestMaxConcurrentStreams(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		synctest.Test(t, func(t *testing.T) {
			l, st := pipeServer(t, ServerOptions{Transport: Transport(transport), MaxConcurrentStreams: 2})
			c := pipeClient(t, l)
			if _, err := c.ShouldRateLimit(t.Context(), someRequest); err != nil {
				t.Fatal(err)
			}
			if ss := l.seen(http2.FrameSettings); len(ss) == 0 || ss[0].maxStreams != 2 {
				t.Fatalf("SETTINGS %+v, want MAX_CONCURRENT_STREAMS 2", ss)
			}
			st.hold()
			var calls []<-chan error
			for range 6 {
				calls = append(calls, callAsync(c))
			}
			time.Sleep(time.Minute)
			synctest.Wait()
			st.mu.Lock()
			waiting := st.waiting
			st.mu.Unlock()
			st.release()
			for i, ch := range calls {
				if err := <-ch; err != nil {
					t.Errorf("call %d: %v", i, err)
				}
			}
			st.mu.Lock()
			most := st.mostWait
			st.mu.Unlock()
			if waiting != 2 || most != 2 || l.dials.Load() != 1 {
				t.Errorf("%d calls in the store at once (most %d) over %d connections, want 2 over 1", waiting, most, l.dials.Load())
			}
		})
	})
}

// Handshake timeout: a connection that never sends the HTTP/2 preface is
// closed after exactly HandshakeTimeout.
func TestHandshakeTimeout(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		synctest.Test(t, func(t *testing.T) {
			l, _ := pipeServer(t, ServerOptions{Transport: Transport(transport), HandshakeTimeout: 3 * time.Second})
			nc, err := l.raw(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			start := time.Now()
			buf := make([]byte, 512)
			for {
				if _, err := nc.Read(buf); err != nil {
					break
				}
			}
			if took := time.Since(start); took != 3*time.Second {
				t.Errorf("silent connection closed after %v, want 3s", took)
			}
		})
	})
}

// Connection cap: connections beyond MaxConnections are closed at once;
// one that ends frees its place.
func TestMaxConnections(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		synctest.Test(t, func(t *testing.T) {
			l, _ := pipeServer(t, ServerOptions{Transport: Transport(transport), MaxConnections: 2})
			var clients []*grpc.ClientConn
			for range 3 {
				cc, err := grpc.NewClient("passthrough:///rls", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(l.dial))
				if err != nil {
					t.Fatal(err)
				}
				defer cc.Close()
				clients = append(clients, cc)
			}
			for i, cc := range clients[:2] {
				if _, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(t.Context(), someRequest); err != nil {
					t.Fatalf("client %d: %v", i, err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if _, err := pb.NewRateLimitServiceClient(clients[2]).ShouldRateLimit(ctx, someRequest); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("the third client: %v, want no connection", err)
			}
			if end := waitFrame(t, l, 3, frameClosed, time.Second); end.typ != frameClosed {
				t.Fatal("the third connection was not closed")
			}
			clients[0].Close()
			synctest.Wait()
			ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if _, err := pb.NewRateLimitServiceClient(clients[2]).ShouldRateLimit(ctx, someRequest, grpc.WaitForReady(true)); err != nil {
				t.Fatalf("the third client once the first left: %v", err)
			}
		})
	})
}

// A unix socket: served, with the socket's mode; a stale socket file is
// replaced, a live one is not.
func TestUnixSocket(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		path := filepath.Join(t.TempDir(), "rls.sock")
		// A socket file left by a process that died.
		stale, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		stale.(*net.UnixListener).SetUnlinkOnClose(false)
		stale.Close()
		lis, err := Listen("unix:"+path, 0)
		if err != nil {
			t.Fatalf("Listen over a stale socket: %v", err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != DefaultSocketMode {
			t.Fatalf("socket mode %v, %v; want %v", fi.Mode().Perm(), err, DefaultSocketMode)
		}
		if _, err := Listen("unix://"+path, 0); err == nil {
			t.Fatal("Listen on a socket a live server holds succeeded")
		}
		e := serveOn(t, lis, ServerOptions{Transport: Transport(transport)}, "unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if resp, err := e.ShouldRateLimit(t.Context(), someRequest); err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("over the unix socket: %v, %v", resp, err)
		}
	})
}

// serveOn serves the example configuration on lis with options o and
// returns a grpc-go client of target.
func serveOn(t *testing.T, lis net.Listener, o ServerOptions, target string, dial ...grpc.DialOption) pb.RateLimitServiceClient {
	t.Helper()
	c, err := envoyconf.Load(examples, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	comp, eng := newDoor(t, newMemStore(t), c, descriptor.Options{}, "")
	o.ShutdownGrace = time.Second
	return pb.NewRateLimitServiceClient(serveSvc(t, NewService(comp, eng, ServiceOptions{Logger: quietLogger()}), o, lis, target, dial...))
}

// The lean transport refuses any TCP address but loopback.
func TestLeanRefusesNonLoopback(t *testing.T) {
	c, err := envoyconf.Load(examples, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	comp, eng := newDoor(t, newMemStore(t), c, descriptor.Options{}, "")
	svc := NewService(comp, eng, ServiceOptions{})
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v", addr, err) // no IPv6 here
			continue
		}
		err = Serve(t.Context(), lis, svc, ServerOptions{Transport: TransportLean})
		if !errors.Is(err, h2grpc.ErrNotLoopback) {
			t.Errorf("lean on %s (%v) = %v, want ErrNotLoopback", addr, lis.Addr(), err)
		}
		if _, err := lis.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("the refused listener on %s is still open: %v", addr, err)
		}
	}
	if _, err := NewServer(svc, ServerOptions{Transport: TransportLean, TLS: TLSOptions{CertFile: "c", KeyFile: "k"}}); err == nil {
		t.Error("lean with TLS accepted")
	}
}

// Bad options are refused with errors that name them, all at once.
func TestServerOptionsErrors(t *testing.T) {
	svc := NewService(nil, nil, ServiceOptions{})
	for _, tc := range []struct {
		o    ServerOptions
		want string
	}{
		{ServerOptions{Transport: "quic"}, `transport "quic"`},
		{ServerOptions{HandshakeTimeout: -time.Second, KeepaliveMinTime: -1}, "handshake timeout -1s: must be positive\nrls: keepalive min time -1ns"},
		{ServerOptions{TLS: TLSOptions{CertFile: "c"}}, "both a certificate file and a key file"},
		{ServerOptions{TLS: TLSOptions{CertFile: "c", KeyFile: "k", ClientSANs: []string{"x"}}}, "client SANs need a client CA file"},
		{ServerOptions{TLS: TLSOptions{CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem"}}, "/nonexistent/c.pem"},
		{ServerOptions{SocketMode: os.ModeDir | 0o600}, "socket mode"},
	} {
		_, err := NewServer(svc, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewServer(%+v) = %v, want an error with %q", tc.o, err, tc.want)
		}
	}
}

// rawCodec sends and receives bytes as they are: for malformed requests.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// A request that is not valid protobuf is INVALID_ARGUMENT on both
// transports (one codec: wire.go), and so is is_negative_hits.
func TestMalformedRequest(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport})
		for _, msg := range [][]byte{
			{0x0a, 0x05, 'e'},        // domain: 5 bytes announced, 1 sent
			{0x12, 0x02, 0xff, 0xff}, // a descriptor that is not a message
			{0x0a, 0x02, 0xc3, 0x28}, // a domain that is not UTF-8
		} {
			var out []byte
			err := e.conn.Invoke(t.Context(), methodShouldRateLimit, &msg, &out, grpc.ForceCodecV2(rawCodec{}))
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("% x: %v, want INVALID_ARGUMENT", msg, err)
			}
		}
	})
}

// quietLogger drops everything below errors.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
}
