package h2grpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// These tests drive the server with grpc-go's own client over TCP on
// 127.0.0.1: what Envoy does, through the implementation gRPC defines.

func TestConcurrentCalls(t *testing.T) {
	ts := startServer(t, newServer(Options{}))
	const conns, goroutines, calls = 4, 64, 200
	ccs := make([]*grpc.ClientConn, conns)
	for i := range ccs {
		ccs[i] = dial(t, ts)
	}
	ctx := timeoutCtx(t, heavyTimeout)
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			cc := ccs[g%conns]
			for i := range calls {
				in := fmt.Sprintf("g%d-call%d-%s", g, i, strings.Repeat("x", i))
				got, err := call(ctx, cc, methodEcho, in)
				if err != nil {
					errc <- err
					return
				}
				if got != in {
					errc <- fmt.Errorf("echo %q answered %q", in, got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if n := ts.accepts.Load(); n != conns {
		t.Errorf("%d connections accepted, want %d", n, conns)
	}
}

func TestHandlerErrors(t *testing.T) {
	s := newServer(Options{})
	s.Handle("/test.Test/Fail", stringHandler(func(ctx context.Context, in string) (string, error) {
		switch in {
		case "plain":
			return "", errors.New("plain error: 100% broken")
		case "panic":
			panic("handler bug")
		case "deadline":
			return "", fmt.Errorf("gave up: %w", context.DeadlineExceeded)
		case "canceled":
			return "", context.Canceled
		case "ok-status":
			// A status error with code OK is no error to grpc-go's
			// status package (nil); the call succeeds.
			return "fine", status.Error(codes.OK, "ignored")
		case "long":
			return "", status.Error(codes.FailedPrecondition, strings.Repeat("é", 2000))
		}
		code, msg, _ := strings.Cut(in, ":")
		var c codes.Code
		if err := c.UnmarshalJSON([]byte(`"` + code + `"`)); err != nil {
			return "", err
		}
		return "", status.Error(c, msg)
	}))
	ts := startServer(t, s)
	cc := dial(t, ts)
	ctx := testCtx(t)
	for _, tc := range []struct {
		in   string
		code codes.Code
		msg  string
	}{
		{"NOT_FOUND:no such key", codes.NotFound, "no such key"},
		{"RESOURCE_EXHAUSTED:over limit", codes.ResourceExhausted, "over limit"},
		{"INVALID_ARGUMENT:", codes.InvalidArgument, ""},
		{"PERMISSION_DENIED:non-ASCII: héllo wörld ✓ 日本語", codes.PermissionDenied, "non-ASCII: héllo wörld ✓ 日本語"},
		{"UNAVAILABLE:percent: 100% %41 %zz %", codes.Unavailable, "percent: 100% %41 %zz %"},
		{"ABORTED:controls\r\n\ttab and ~ and \x7f", codes.Aborted, "controls\r\n\ttab and ~ and \x7f"},
		{"plain", codes.Unknown, "plain error: 100% broken"},
		{"panic", codes.Internal, "internal error"},
		{"deadline", codes.DeadlineExceeded, "gave up: context deadline exceeded"},
		{"canceled", codes.Canceled, "context canceled"},
		// The message is cut to 1024 bytes on the wire: 512 "é".
		{"long", codes.FailedPrecondition, strings.Repeat("é", 512)},
	} {
		_, err := call(ctx, cc, "/test.Test/Fail", tc.in)
		st := status.Convert(err)
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("%q: got %v %q, want %v %q", tc.in, st.Code(), st.Message(), tc.code, tc.msg)
		}
		// The server keeps serving on the same connection after every
		// error, panics included.
		if got, err := call(ctx, cc, methodEcho, "after "+tc.in); err != nil || got != "after "+tc.in {
			t.Fatalf("after %q: %q, %v", tc.in, got, err)
		}
	}
	if got, err := call(ctx, cc, "/test.Test/Fail", "ok-status"); err != nil || got != "fine" {
		t.Errorf("ok-status: %q, %v", got, err)
	}
	if n := ts.accepts.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

func TestUnknownMethod(t *testing.T) {
	ts := startServer(t, newServer(Options{}))
	cc := dial(t, ts)
	_, err := call(testCtx(t), cc, "/test.Test/Nope", "x")
	if st := status.Convert(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "/test.Test/Nope") {
		t.Errorf("got %v, want UNIMPLEMENTED naming the method", err)
	}
	if got, err := call(testCtx(t), cc, methodEcho, "still"); err != nil || got != "still" {
		t.Errorf("echo after: %q, %v", got, err)
	}
}

// blocker is a handler that reports each call's start and waits until its
// context is done or it is released; it records how each call ended.
type blocker struct {
	started  chan string    // the call's input, when its handler starts
	release  chan struct{}  // closed to let every call answer
	once     sync.Once      // closes release
	ended    chan error     // ctx.Err() when the handler saw ctx done, nil when released
	running  atomic.Int32   // handlers running now
	maxSeen  atomic.Int32   // most handlers running at once
	deadline chan time.Time // each call's ctx deadline, if any
}

func newBlocker() *blocker {
	return &blocker{
		started:  make(chan string, 1024),
		release:  make(chan struct{}),
		ended:    make(chan error, 1024),
		deadline: make(chan time.Time, 1024),
	}
}

func (b *blocker) unblock() { b.once.Do(func() { close(b.release) }) }

func (b *blocker) handler() Handler {
	return stringHandler(func(ctx context.Context, in string) (string, error) {
		n := b.running.Add(1)
		defer b.running.Add(-1)
		for {
			m := b.maxSeen.Load()
			if n <= m || b.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		if d, ok := ctx.Deadline(); ok {
			b.deadline <- d
		}
		b.started <- in
		select {
		case <-ctx.Done():
			b.ended <- ctx.Err()
			return "", ctx.Err()
		case <-b.release:
			b.ended <- nil
			return "done " + in, nil
		}
	})
}

// waitStarted waits for n handlers to start.
func (b *blocker) waitStarted(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-b.started:
		case <-time.After(waitTimeout):
			t.Fatal("handler did not start")
		}
	}
}

// waitEnded waits for a handler to end and returns how.
func (b *blocker) waitEnded(t *testing.T) error {
	t.Helper()
	select {
	case err := <-b.ended:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("handler did not end")
		return nil
	}
}

func TestDeadline(t *testing.T) {
	b := newBlocker()
	defer b.unblock()
	s := newServer(Options{})
	s.Handle("/test.Test/Block", b.handler())
	ts := startServer(t, s)
	cc := dial(t, ts)
	// Connect first: a 50ms deadline must not be spent dialling on a
	// loaded machine, or the call never reaches the handler.
	if _, err := call(testCtx(t), cc, methodEcho, "warm up"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := call(ctx, cc, "/test.Test/Block", "slow")
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DEADLINE_EXCEEDED", err)
	}
	// The handler saw grpc-timeout as its context's deadline and its
	// context ended: by its deadline, or by the client's RST_STREAM.
	select {
	case d := <-b.deadline:
		if d.Before(start) || d.After(start.Add(time.Second)) {
			t.Errorf("handler deadline %v, call started %v with a 50ms timeout", d, start)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the call never reached the handler")
	}
	if err := b.waitEnded(t); err == nil {
		t.Error("handler released instead of cancelled")
	}
}

func TestClientCancel(t *testing.T) {
	b := newBlocker()
	defer b.unblock()
	s := newServer(Options{})
	s.Handle("/test.Test/Block", b.handler())
	ts := startServer(t, s)
	cc := dial(t, ts)
	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := call(ctx, cc, "/test.Test/Block", "cancel me")
		errc <- err
	}()
	b.waitStarted(t, 1)
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("got %v, want CANCELED", err)
	}
	// No deadline: only the client's RST_STREAM can end the handler.
	if err := b.waitEnded(t); !errors.Is(err, context.Canceled) {
		t.Errorf("handler ended with %v, want context.Canceled", err)
	}
	if got, err := call(testCtx(t), cc, methodEcho, "next"); err != nil || got != "next" {
		t.Errorf("echo after: %q, %v", got, err)
	}
}

func TestLargeMessages(t *testing.T) {
	ts := startServer(t, newServer(Options{}))
	cc := dial(t, ts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))
	ctx := timeoutCtx(t, heavyTimeout)
	big := func(i int) string { return strings.Repeat(fmt.Sprintf("%c", 'a'+i%26), 3<<20) }
	// One at a time, then several at once: 3 MiB each way exceed every
	// initial flow-control window in both directions.
	if got, err := call(ctx, cc, methodEcho, big(0)); err != nil || got != big(0) {
		t.Fatalf("3 MiB echo: %d bytes, %v", len(got), err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if got, err := call(ctx, cc, methodEcho, big(i)); err != nil || got != big(i) {
				t.Errorf("3 MiB echo %d: %d bytes, %v", i, len(got), err)
			}
		})
	}
	wg.Wait()

	// Above MaxRecvMsgSize (4 MiB): RESOURCE_EXHAUSTED, and the connection
	// keeps serving.
	_, err := call(ctx, cc, methodEcho, strings.Repeat("z", 5<<20))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("5 MiB request: %v, want RESOURCE_EXHAUSTED", err)
	}
	if got, err := call(ctx, cc, methodEcho, "small"); err != nil || got != "small" {
		t.Errorf("after: %q, %v", got, err)
	}
	if got, err := call(ctx, cc, methodEcho, big(1)); err != nil || got != big(1) {
		t.Errorf("3 MiB echo after: %d bytes, %v", len(got), err)
	}
	if n := ts.accepts.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

func TestMaxRecvMsgSizeOption(t *testing.T) {
	ts := startServer(t, newServer(Options{MaxRecvMsgSize: 100}))
	cc := dial(t, ts)
	ctx := testCtx(t)
	// 100 bytes of message: a StringValue of 98 bytes (tag and length).
	if got, err := call(ctx, cc, methodEcho, strings.Repeat("a", 98)); err != nil || len(got) != 98 {
		t.Errorf("at the limit: %d bytes, %v", len(got), err)
	}
	if _, err := call(ctx, cc, methodEcho, strings.Repeat("a", 99)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("over the limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	if got, err := call(ctx, cc, methodEcho, "ok"); err != nil || got != "ok" {
		t.Errorf("after: %q, %v", got, err)
	}
}

func TestMaxConcurrentStreams(t *testing.T) {
	b := newBlocker()
	defer b.unblock()
	s := newServer(Options{MaxConcurrentStreams: 2})
	s.Handle("/test.Test/Block", b.handler())
	ts := startServer(t, s)
	cc := dial(t, ts)
	ctx := testCtx(t)
	const n = 8
	errc := make(chan error, n)
	for i := range n {
		go func() {
			got, err := call(ctx, cc, "/test.Test/Block", fmt.Sprint(i))
			if err == nil && got != fmt.Sprint("done ", i) {
				err = fmt.Errorf("call %d answered %q", i, got)
			}
			errc <- err
		}()
	}
	b.waitStarted(t, 2)
	// Give the other calls the time to (wrongly) start.
	select {
	case in := <-b.started:
		t.Errorf("call %s started while 2 were running", in)
	case <-time.After(100 * time.Millisecond):
	}
	b.unblock()
	for range n {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	if m := b.maxSeen.Load(); m > 2 {
		t.Errorf("%d handlers ran at once, MaxConcurrentStreams is 2", m)
	}
}

func TestShutdownGraceful(t *testing.T) {
	done := leakCheck(t)
	b := newBlocker()
	defer b.unblock()
	s, ts, serveErr := serveBlocking(t, b)
	cc := dial(t, ts)
	ctx := testCtx(t)
	if _, err := call(ctx, cc, methodEcho, "warm"); err != nil {
		t.Fatal(err)
	}
	callErr := make(chan error, 1)
	go func() {
		got, err := call(ctx, cc, "/test.Test/Block", "in flight")
		if err == nil && got != "done in flight" {
			err = fmt.Errorf("answered %q", got)
		}
		callErr <- err
	}()
	b.waitStarted(t, 1)
	shutdownErr := make(chan error, 1)
	go func() { shutdownErr <- s.Shutdown(ctx) }()
	// New connections are refused once Shutdown closed the listener.
	for deadline := time.Now().Add(waitTimeout); ; {
		nc, err := net.DialTimeout("tcp", ts.addr, time.Second)
		if err != nil {
			break
		}
		nc.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts connections")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-shutdownErr:
		t.Fatalf("Shutdown returned %v with a call in flight", err)
	default:
	}
	b.unblock()
	if err := <-callErr; err != nil {
		t.Errorf("call in flight: %v", err)
	}
	select {
	case err := <-shutdownErr:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Shutdown did not return")
	}
	if err := <-serveErr; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	// A second Shutdown, a Close, and Serve afterwards are harmless.
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	s.Close()
	lis2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(lis2); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v", err)
	}
	cc.Close()
	done()
}

func TestShutdownExpired(t *testing.T) {
	done := leakCheck(t)
	b := newBlocker()
	defer b.unblock()
	s, ts, serveErr := serveBlocking(t, b)
	cc := dial(t, ts)
	callErr := make(chan error, 1)
	go func() {
		_, err := call(testCtx(t), cc, "/test.Test/Block", "stuck")
		callErr <- err
	}()
	b.waitStarted(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want context.DeadlineExceeded", err)
	}
	if err := b.waitEnded(t); !errors.Is(err, context.Canceled) {
		t.Errorf("handler ended with %v, want its context cancelled", err)
	}
	if err := <-callErr; status.Code(err) != codes.Unavailable {
		t.Errorf("call cut by Shutdown: %v, want UNAVAILABLE", err)
	}
	if err := <-serveErr; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	s.Close()
	cc.Close()
	done()
}

func TestClose(t *testing.T) {
	done := leakCheck(t)
	b := newBlocker()
	defer b.unblock()
	s, ts, serveErr := serveBlocking(t, b)
	cc := dial(t, ts)
	const n = 4
	callErr := make(chan error, n)
	for range n {
		go func() {
			_, err := call(testCtx(t), cc, "/test.Test/Block", "cut")
			callErr <- err
		}()
	}
	b.waitStarted(t, n)
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for range n {
		if err := <-callErr; status.Code(err) != codes.Unavailable {
			t.Errorf("call cut by Close: %v, want UNAVAILABLE", err)
		}
		if err := b.waitEnded(t); !errors.Is(err, context.Canceled) {
			t.Errorf("handler ended with %v, want its context cancelled", err)
		}
	}
	if err := <-serveErr; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	// Close and Shutdown again, concurrently: no panic, nothing left.
	var wg sync.WaitGroup
	wg.Go(func() { s.Close() })
	wg.Go(func() { s.Shutdown(t.Context()) })
	wg.Go(func() { s.Close() })
	wg.Wait()
	cc.Close()
	done()
}

// Serve on several listeners at once, and Shutdown closes all of them.
func TestServeManyListeners(t *testing.T) {
	done := leakCheck(t)
	s := newServer(Options{})
	var addrs []string
	serveErr := make(chan error, 3)
	for range 3 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, lis.Addr().String())
		go func() { serveErr <- s.Serve(lis) }()
	}
	for _, a := range addrs {
		cc := dial(t, &testServer{addr: a})
		if got, err := call(testCtx(t), cc, methodEcho, a); err != nil || got != a {
			t.Errorf("%s: %q, %v", a, got, err)
		}
		cc.Close()
	}
	if err := s.Shutdown(testCtx(t)); err != nil {
		t.Error(err)
	}
	for range 3 {
		if err := <-serveErr; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}
	done()
}

// serveBlocking serves b's handler at /test.Test/Block on loopback, for the
// tests that stop the server themselves and check what Serve returned.
func serveBlocking(t *testing.T, b *blocker) (*Server, *testServer, chan error) {
	t.Helper()
	s := newServer(Options{})
	s.Handle("/test.Test/Block", b.handler())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- s.Serve(lis) }()
	return s, &testServer{Server: s, addr: lis.Addr().String()}, serveErr
}
