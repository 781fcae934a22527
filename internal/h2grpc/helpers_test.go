package h2grpc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Every test closes what it starts: servers, client connections, raw
// connections. goleak checks that nothing is left once all tests ran, and
// the tests about shutdown check it right away (leakCheck).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// leakCheck notes the goroutines running now; the function it returns
// fails t if any other goroutine is still running then (goleak retries for
// a while, so goroutines on their way out pass). Tests using it must not
// be parallel.
func leakCheck(t *testing.T) func() {
	before := goleak.IgnoreCurrent()
	return func() {
		t.Helper()
		if err := goleak.Find(before); err != nil {
			t.Error(err)
		}
	}
}

// quietLogger drops the server's logs (protocol errors are expected in
// many tests) unless -v asks for them.
func quietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// waitTimeout bounds every wait in these tests: a failure shows as a
// timeout instead of a hung test binary. heavyTimeout bounds the tests that
// move a lot of data, slow under -race on a loaded machine.
const (
	waitTimeout  = 10 * time.Second
	heavyTimeout = time.Minute
)

// testServer is a server on 127.0.0.1 with its Serve goroutine.
type testServer struct {
	*Server
	addr    string
	serve   chan error
	accepts atomic.Int32 // connections accepted
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// startServer serves s on a new loopback listener; the cleanup closes it
// (harmless after a test's own Shutdown or Close) and checks Serve's
// result.
func startServer(t *testing.T, s *Server) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, addr: lis.Addr().String(), serve: make(chan error, 1)}
	go func() { ts.serve <- s.Serve(countingListener{lis, &ts.accepts}) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case err := <-ts.serve:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
		case <-time.After(waitTimeout):
			t.Error("Serve did not return after Close")
		}
	})
	return ts
}

// newServer is NewServer with the test logger and the echo handler
// registered.
func newServer(o Options) *Server {
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	s := NewServer(o)
	s.Handle(methodEcho, echo)
	return s
}

const (
	methodEcho = "/test.Test/Echo"
)

// echo answers a StringValue with the same value.
func echo(_ context.Context, msg, out []byte) ([]byte, error) {
	var in wrapperspb.StringValue
	if err := proto.Unmarshal(msg, &in); err != nil {
		return nil, err
	}
	return proto.MarshalOptions{}.MarshalAppend(out, &in)
}

// stringHandler adapts a function of strings to a Handler on StringValue
// messages.
func stringHandler(f func(ctx context.Context, in string) (string, error)) Handler {
	return func(ctx context.Context, msg, out []byte) ([]byte, error) {
		var in wrapperspb.StringValue
		if err := proto.Unmarshal(msg, &in); err != nil {
			return nil, err
		}
		res, err := f(ctx, in.Value)
		if err != nil {
			return nil, err
		}
		return proto.MarshalOptions{}.MarshalAppend(out, wrapperspb.String(res))
	}
}

// dial returns a grpc-go client connection to ts, closed at cleanup.
func dial(t *testing.T, ts *testServer, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	cc, err := grpc.NewClient("passthrough:///"+ts.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// call invokes method with a StringValue and returns the answer's value.
func call(ctx context.Context, cc *grpc.ClientConn, method, in string, opts ...grpc.CallOption) (string, error) {
	var out wrapperspb.StringValue
	err := cc.Invoke(ctx, method, wrapperspb.String(in), &out, opts...)
	return out.Value, err
}

// testCtx is a context bounded by waitTimeout.
func testCtx(t *testing.T) context.Context { return timeoutCtx(t, waitTimeout) }

func timeoutCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// rawClient speaks HTTP/2 frame by frame to a server: the tests use it
// for everything grpc-go's client would never send.
type rawClient struct {
	t    testing.TB
	nc   net.Conn
	fr   *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer
}

// dialRaw connects to ts without any handshake.
func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return newRawClient(t, nc)
}

func newRawClient(t testing.TB, nc net.Conn) *rawClient {
	rc := &rawClient{t: t, nc: nc}
	rc.fr = http2.NewFramer(nc, nc)
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	rc.fr.MaxHeaderListSize = 1 << 20
	rc.henc = hpack.NewEncoder(&rc.hbuf)
	t.Cleanup(func() { nc.Close() })
	return rc
}

// handshake sends the preface and settings, and reads the server's
// SETTINGS, WINDOW_UPDATE and the ACK of ours, whatever their order.
func (rc *rawClient) handshake(settings ...http2.Setting) map[http2.SettingID]uint32 {
	rc.t.Helper()
	if _, err := io.WriteString(rc.nc, http2.ClientPreface); err != nil {
		rc.t.Fatal(err)
	}
	rc.check(rc.fr.WriteSettings(settings...))
	got := map[http2.SettingID]uint32{}
	var sawSettings, sawAck bool
	for !sawSettings || !sawAck {
		switch f := rc.read().(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				sawAck = true
				continue
			}
			sawSettings = true
			f.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
			rc.check(rc.fr.WriteSettingsAck())
		case *http2.WindowUpdateFrame:
		default:
			rc.t.Fatalf("handshake: unexpected %v", f)
		}
	}
	return got
}

func (rc *rawClient) check(err error) {
	rc.t.Helper()
	if err != nil {
		rc.t.Fatal(err)
	}
}

// read returns the next frame, failing the test after waitTimeout.
func (rc *rawClient) read() http2.Frame {
	rc.t.Helper()
	f, err := rc.readErr(waitTimeout)
	if err != nil {
		rc.t.Fatalf("read frame: %v", err)
	}
	return f
}

func (rc *rawClient) readErr(d time.Duration) (http2.Frame, error) {
	rc.nc.SetReadDeadline(time.Now().Add(d))
	return rc.fr.ReadFrame()
}

// readUntil reads frames until keep returns true for one, which it
// returns; frames before it are passed to keep too.
func (rc *rawClient) readUntil(keep func(http2.Frame) bool) http2.Frame {
	rc.t.Helper()
	for {
		if f := rc.read(); keep(f) {
			return f
		}
	}
}

// expectGoAway reads until a GOAWAY and checks its code, then checks that
// the server closes the connection.
func (rc *rawClient) expectGoAway(code http2.ErrCode) {
	rc.t.Helper()
	f := rc.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if ga := f.(*http2.GoAwayFrame); ga.ErrCode != code {
		rc.t.Fatalf("GOAWAY %v (%q), want %v", ga.ErrCode, ga.DebugData(), code)
	}
	rc.expectClosed()
}

// expectClosed reads until the server closes the connection.
func (rc *rawClient) expectClosed() {
	rc.t.Helper()
	for {
		_, err := rc.readErr(waitTimeout)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			rc.t.Fatal("the server did not close the connection")
		}
		return
	}
}

// expectReset reads until RST_STREAM on id and checks its code.
func (rc *rawClient) expectReset(id uint32, code http2.ErrCode) {
	rc.t.Helper()
	f := rc.readUntil(func(f http2.Frame) bool {
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			rc.t.Fatalf("GOAWAY %v (%q) while waiting for RST_STREAM on %d", ga.ErrCode, ga.DebugData(), id)
		}
		rs, ok := f.(*http2.RSTStreamFrame)
		return ok && rs.StreamID == id
	})
	if rs := f.(*http2.RSTStreamFrame); rs.ErrCode != code {
		rc.t.Fatalf("RST_STREAM %v on %d, want %v", rs.ErrCode, id, code)
	}
}

// headers encodes fields as one header block.
func (rc *rawClient) headers(fields ...string) []byte {
	rc.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		rc.henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(rc.hbuf.Bytes())
}

// grpcHeaders is the header block of a gRPC call to method, then extra
// name, value pairs.
func (rc *rawClient) grpcHeaders(method string, extra ...string) []byte {
	return rc.headers(append([]string{
		":method", "POST", ":scheme", "http", ":path", method, ":authority", "test",
		"content-type", "application/grpc", "te", "trailers",
	}, extra...)...)
}

func (rc *rawClient) writeHeaders(id uint32, endStream bool, block []byte) {
	rc.t.Helper()
	rc.check(rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: endStream, EndHeaders: true}))
}

// grpcMessage frames a StringValue as one gRPC length-prefixed message.
func grpcMessage(s string) []byte {
	b, err := proto.Marshal(wrapperspb.String(s))
	if err != nil {
		panic(err)
	}
	return append([]byte{0, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
}

// call sends a complete unary call to method with s on stream id.
func (rc *rawClient) call(id uint32, method, s string) {
	rc.t.Helper()
	rc.writeHeaders(id, false, rc.grpcHeaders(method))
	rc.check(rc.fr.WriteData(id, true, grpcMessage(s)))
}

// response is what a raw client read of one stream.
type response struct {
	headers  []hpack.HeaderField // the first header block
	data     []byte
	trailers []hpack.HeaderField
	reset    http2.ErrCode
	wasReset bool
}

func (r *response) field(name string) string {
	for _, hf := range append(append([]hpack.HeaderField{}, r.headers...), r.trailers...) {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// readResponse reads frames until stream id ends (END_STREAM or
// RST_STREAM); frames of other streams are given to other (may be nil).
func (rc *rawClient) readResponse(id uint32, other func(http2.Frame)) *response {
	rc.t.Helper()
	r := &response{}
	for {
		f := rc.read()
		if f.Header().StreamID != id {
			if ga, ok := f.(*http2.GoAwayFrame); ok && ga.ErrCode != http2.ErrCodeNo {
				rc.t.Fatalf("GOAWAY %v (%q) while reading stream %d", ga.ErrCode, ga.DebugData(), id)
			}
			if other != nil {
				other(f)
			}
			continue
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if r.headers == nil {
				r.headers = f.Fields
			} else {
				r.trailers = f.Fields
			}
			if f.StreamEnded() {
				return r
			}
		case *http2.DataFrame:
			r.data = append(r.data, f.Data()...)
			if f.StreamEnded() {
				return r
			}
		case *http2.RSTStreamFrame:
			r.reset, r.wasReset = f.ErrCode, true
			return r
		}
	}
}

// fieldsString renders header fields for failure messages.
func fieldsString(fs []hpack.HeaderField) string {
	var sb strings.Builder
	for _, f := range fs {
		sb.WriteString(f.Name + ": " + f.Value + "; ")
	}
	return sb.String()
}

// onlyConn returns the server's one connection, waiting for it to be
// registered.
func onlyConn(t *testing.T, s *Server) *conn {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := len(s.conns)
		var c *conn
		for c = range s.conns {
		}
		s.mu.Unlock()
		if n == 1 {
			return c
		}
	}
	t.Fatal("the server has not exactly one connection")
	return nil
}

// connState is a connection's bookkeeping, read under its lock.
type connState struct {
	active, streams, blocked, out, held int
}

func (c *conn) state() connState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return connState{int(c.active), len(c.streams), len(c.blocked), len(c.out), c.held}
}

// waitFor polls cond until it holds, failing t after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
