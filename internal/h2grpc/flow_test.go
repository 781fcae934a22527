package h2grpc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sized answers "n" with a message of n bytes of 'r' (not a protobuf
// message: the raw client does not decode it).
func sized(n int) Handler {
	return func(_ context.Context, _, out []byte) ([]byte, error) {
		return append(out, bytes.Repeat([]byte{'r'}, n)...), nil
	}
}

// framed is a gRPC length-prefixed message of n bytes of 'r'.
func framed(n int) []byte {
	return append([]byte{0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, bytes.Repeat([]byte{'r'}, n)...)
}

// A client that grants no window at first still gets the whole answer once
// it does, in pieces, and never more DATA than it granted.
func TestZeroInitialWindow(t *testing.T) {
	s := newServer(Options{})
	s.Handle("/test.Test/Sized", sized(100_000))
	ts := startServer(t, s)

	for _, how := range []string{"WINDOW_UPDATE", "SETTINGS"} {
		t.Run(how, func(t *testing.T) {
			rc := dialRaw(t, ts.addr)
			rc.t = t
			rc.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			// The connection window is 65535: open it, so that only the
			// stream's window holds the answer back.
			rc.check(rc.fr.WriteWindowUpdate(0, 1<<30))
			rc.call(1, "/test.Test/Sized", "")
			// No DATA before the PING's answer (HEADERS may come).
			rc.check(rc.fr.WritePing(false, [8]byte{7}))
			rc.readUntil(func(f http2.Frame) bool {
				switch f := f.(type) {
				case *http2.DataFrame:
					t.Fatalf("DATA (%d bytes) with a zero window", len(f.Data()))
				case *http2.PingFrame:
					return f.IsAck()
				}
				return false
			})
			want := framed(100_000)
			var got []byte
			var trailers bool
			if how == "SETTINGS" {
				// Raising SETTINGS_INITIAL_WINDOW_SIZE raises the window of
				// every open stream (RFC 9113 §6.9.2).
				rc.check(rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}))
			}
			granted := 0
			for !trailers {
				if how == "WINDOW_UPDATE" && len(got) == granted {
					rc.check(rc.fr.WriteWindowUpdate(1, 7000))
					granted += 7000
				}
				switch f := rc.read().(type) {
				case *http2.DataFrame:
					got = append(got, f.Data()...)
					if how == "WINDOW_UPDATE" && len(got) > granted {
						t.Fatalf("%d bytes of DATA with %d granted", len(got), granted)
					}
				case *http2.MetaHeadersFrame:
					if f.StreamEnded() {
						trailers = true
						if f.PseudoValue("status") != "" || !hasField(f, "grpc-status", "0") {
							t.Fatalf("trailers %s", fieldsString(f.Fields))
						}
					}
				case *http2.RSTStreamFrame, *http2.GoAwayFrame:
					t.Fatalf("%v", f)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("answer %d bytes, want %d", len(got), len(want))
			}
		})
	}
}

func hasField(f *http2.MetaHeadersFrame, name, value string) bool {
	for _, hf := range f.Fields {
		if hf.Name == name && hf.Value == value {
			return true
		}
	}
	return false
}

// Shrinking the initial window below what was sent makes the window
// negative; the server waits until WINDOW_UPDATE makes it positive.
func TestNegativeWindow(t *testing.T) {
	s := newServer(Options{})
	s.Handle("/test.Test/Sized", sized(100))
	ts := startServer(t, s)
	rc := dialRaw(t, ts.addr)
	rc.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 30})
	rc.call(1, "/test.Test/Sized", "")
	var got []byte
	rc.readUntil(func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok {
			got = append(got, d.Data()...)
		}
		return len(got) == 30
	})
	rc.check(rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})) // window -20
	rc.check(rc.fr.WriteWindowUpdate(1, 25))                                                  // window 5
	rc.check(rc.fr.WritePing(false, [8]byte{1}))
	rc.readUntil(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.DataFrame:
			got = append(got, f.Data()...)
		case *http2.PingFrame:
			return f.IsAck()
		}
		return false
	})
	if len(got) != 35 {
		t.Fatalf("%d bytes of DATA, want 35 (30, then 5 once the window is positive)", len(got))
	}
	rc.check(rc.fr.WriteWindowUpdate(1, 1000))
	r := rc.readResponse(1, nil)
	if got = append(got, r.data...); !bytes.Equal(got, framed(100)) || r.field("grpc-status") != "0" {
		t.Fatalf("answer %q, trailers %s", got, fieldsString(r.trailers))
	}
}

func TestStreamWindowOverflow(t *testing.T) {
	b := newBlocker()
	defer b.unblock()
	s := newServer(Options{})
	s.Handle("/test.Test/Block", b.handler())
	ts := startServer(t, s)
	rc := dialRaw(t, ts.addr)
	rc.handshake()
	rc.call(1, "/test.Test/Block", "x")
	b.waitStarted(t, 1)
	rc.check(rc.fr.WriteWindowUpdate(1, 1<<31-1))
	rc.expectReset(1, http2.ErrCodeFlowControl)
	if err := b.waitEnded(t); !errors.Is(err, context.Canceled) {
		t.Errorf("handler ended with %v, want its context cancelled", err)
	}
	rc.call(3, methodEcho, "next")
	checkOK(t, rc.readResponse(3, nil), grpcMessage("next"))
}

// Answers waiting for flow-control window still count against
// MaxConcurrentStreams: a client that never grants window cannot make the
// server hold more than that many answers.
func TestBlockedAnswersCount(t *testing.T) {
	s := newServer(Options{MaxConcurrentStreams: 4})
	s.Handle("/test.Test/Sized", sized(40_000))
	ts := startServer(t, s)
	rc := dialRaw(t, ts.addr)
	rc.handshake()
	c := onlyConn(t, s)
	// 5 answers of 40 KB, 65535 bytes of connection window: the first
	// answer is sent whole, the 4 others wait (one of them partly sent).
	rc.call(1, "/test.Test/Sized", "")
	if r := rc.readResponse(1, nil); r.field("grpc-status") != "0" || len(r.data) != 40005 {
		t.Fatalf("first answer: %d bytes, %s", len(r.data), fieldsString(r.trailers))
	}
	for id := uint32(3); id <= 9; id += 2 {
		rc.call(id, "/test.Test/Sized", "")
	}
	waitFor(t, "answers to wait for window", func() bool { return c.state().blocked == 4 })
	for id := uint32(11); id <= 17; id += 2 {
		rc.call(id, "/test.Test/Sized", "")
		rc.expectReset(id, http2.ErrCodeRefusedStream)
	}
	if st := c.state(); st.active != 4 || st.blocked != 4 {
		t.Fatalf("%+v with 4 answers waiting, MaxConcurrentStreams 4", st)
	}
	// Granting window completes every answer.
	rc.check(rc.fr.WriteWindowUpdate(0, 1<<20))
	ended := map[uint32]bool{}
	for len(ended) < 4 {
		switch f := rc.read().(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				ended[f.StreamID] = true
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("%v", f)
		}
	}
	waitFor(t, "the streams to be released", func() bool { return c.state() == connState{} })
	rc.call(19, methodEcho, "after")
	checkOK(t, rc.readResponse(19, nil), grpcMessage("after"))
}

// A client that opens every window but reads slowly: the server queues a
// bounded amount for it (maxQueuedData) and keeps the rest of the answers
// where they are, instead of copying them all into its write buffer or
// closing the connection; once the client reads, every answer arrives.
func TestSlowReaderLargeAnswers(t *testing.T) {
	const calls, size = 16, 1 << 20
	s := newServer(Options{MaxConcurrentStreams: calls})
	var answered atomic.Int32
	s.Handle("/test.Test/Big", func(ctx context.Context, msg, out []byte) ([]byte, error) {
		defer answered.Add(1)
		return sized(size)(ctx, msg, out)
	})
	ts := startServer(t, s)
	rc := dialRaw(t, ts.addr)
	rc.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	rc.check(rc.fr.WriteWindowUpdate(0, 1<<31-1-65535))
	c := onlyConn(t, s)
	for id := uint32(1); id < 2*calls; id += 2 {
		rc.call(id, "/test.Test/Big", "")
	}
	// 16 MiB of answers against a client that does not read (yet): more
	// than loopback's socket buffers take.
	waitFor(t, "the handlers to answer", func() bool { return answered.Load() == calls })
	waitFor(t, "the writer to be stuck", func() bool {
		st1 := c.state()
		time.Sleep(20 * time.Millisecond)
		return c.state() == st1
	})
	st := c.state()
	t.Logf("stuck: %+v", st)
	if st.out > maxQueuedData+64<<10 {
		t.Errorf("%d bytes queued for a client that does not read; at most maxQueuedData (%d) of DATA", st.out, maxQueuedData)
	}
	if st.active > calls || st.blocked > calls {
		t.Errorf("%+v", st)
	}
	// Now read: every answer arrives whole.
	got := map[uint32]int{}
	for ended := 0; ended < calls; {
		switch f := rc.read().(type) {
		case *http2.DataFrame:
			got[f.StreamID] += len(f.Data())
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				ended++
				if got[f.StreamID] != size+5 || !hasField(f, "grpc-status", "0") {
					t.Fatalf("stream %d: %d bytes, trailers %s", f.StreamID, got[f.StreamID], fieldsString(f.Fields))
				}
			}
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			t.Fatalf("%v", f)
		}
	}
	waitFor(t, "the streams to be released", func() bool { return c.state().active == 0 })
}

// A peer that sends requests and never reads the answers: the bytes the
// server queues for it are bounded (maxPendingWrite), after which the
// server closes the connection.
func TestPeerNeverReads(t *testing.T) {
	s := newServer(Options{})
	ts := startServer(t, s)
	nc, err := net.DialTimeout("tcp", ts.addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rc := newRawClient(t, nc)
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	rc.check(rc.fr.WriteSettings())
	// Unknown methods with long names: each answer is a trailers-only
	// UNIMPLEMENTED of about 1 KiB naming the method, not flow-controlled.
	// With the socket buffers, 40 MB of answers is far past the bound.
	c := onlyConn(t, s)
	maxOut := 0
	var werr error
	for i := uint32(0); i < 40_000; i++ {
		nc.SetWriteDeadline(time.Now().Add(waitTimeout))
		method := "/" + strings.Repeat(string(rune('a'+i%26)), 1000) + "/" + string(rune('A'+i%26))
		if werr = rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2*i + 1, BlockFragment: rc.grpcHeaders(method), EndStream: true, EndHeaders: true}); werr != nil {
			break
		}
		if i%512 == 0 {
			maxOut = max(maxOut, c.state().out)
		}
	}
	var ne net.Error
	if werr == nil || errors.As(werr, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection of a peer that never reads (write error %v)", werr)
	}
	if maxOut > maxPendingWrite+64<<10 {
		t.Errorf("%d bytes queued, bound %d", maxOut, maxPendingWrite)
	}
	waitFor(t, "the connection to be forgotten", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 0
	})
	// Others are still served.
	cc := dial(t, ts)
	if got, err := call(testCtx(t), cc, methodEcho, "fine"); err != nil || got != "fine" {
		t.Errorf("%q, %v", got, err)
	}
}

// Rapid reset (CVE-2023-44487): a client opening calls and resetting them
// at once never has more handlers running than MaxConcurrentStreams, since
// a reset call counts until its handler returns.
func TestRapidReset(t *testing.T) {
	for _, respectsCtx := range []bool{true, false} {
		name := "handler returns on cancel"
		if !respectsCtx {
			name = "handler ignores cancel"
		}
		t.Run(name, func(t *testing.T) {
			release := make(chan struct{})
			var running, maxSeen, calls atomic.Int32
			s := newServer(Options{MaxConcurrentStreams: 4})
			s.Handle("/test.Test/Slow", func(ctx context.Context, msg, out []byte) ([]byte, error) {
				calls.Add(1)
				n := running.Add(1)
				defer running.Add(-1)
				for m := maxSeen.Load(); n > m && !maxSeen.CompareAndSwap(m, n); m = maxSeen.Load() {
				}
				if respectsCtx {
					select {
					case <-ctx.Done():
					case <-release:
					}
				} else {
					<-release
				}
				return out, nil
			})
			ts := startServer(t, s)
			nc, err := net.DialTimeout("tcp", ts.addr, waitTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			rc := newRawClient(t, nc)
			nc.Write([]byte(http2.ClientPreface))
			rc.check(rc.fr.WriteSettings())
			// Read and drop everything the server sends.
			drained := make(chan struct{})
			go func() {
				defer close(drained)
				io.Copy(io.Discard, nc)
			}()
			msg := grpcMessage("x")
			const n = 3000
			for i := uint32(0); i < n; i++ {
				id := 2*i + 1
				rc.writeHeaders(id, false, rc.grpcHeaders("/test.Test/Slow"))
				rc.check(rc.fr.WriteData(id, true, msg))
				rc.check(rc.fr.WriteRSTStream(id, http2.ErrCodeCancel))
			}
			c := onlyConn(t, s)
			waitFor(t, "the server to read every frame", func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				return c.maxStreamID == 2*n-1 && len(c.streams) <= 4
			})
			if m := maxSeen.Load(); m > 4 {
				t.Errorf("%d handlers ran at once, MaxConcurrentStreams 4", m)
			}
			close(release)
			waitFor(t, "the streams to be released", func() bool { return c.state().active == 0 })
			t.Logf("%d of %d calls reached their handler", calls.Load(), n)
			if !respectsCtx && calls.Load() > 4 {
				t.Errorf("%d handlers ran while 4 never returned", calls.Load())
			}
			nc.Close()
			<-drained
			cc := dial(t, ts)
			if got, err := call(testCtx(t), cc, methodEcho, "fine"); err != nil || got != "fine" {
				t.Errorf("%q, %v", got, err)
			}
		})
	}
}

// Request bytes a connection buffers are bounded: past the budget a call
// is answered RESOURCE_EXHAUSTED, and the others go on.
func TestConnRecvBudget(t *testing.T) {
	s := newServer(Options{})
	s.maxHeld = 1500
	ts := startServer(t, s)
	rc := dialRaw(t, ts.addr)
	rc.handshake()
	c := onlyConn(t, s)
	msg := grpcMessage(strings.Repeat("m", 1093)) // 1100 bytes
	rc.writeHeaders(1, false, rc.grpcHeaders(methodEcho))
	rc.check(rc.fr.WriteData(1, false, msg[:600]))
	rc.writeHeaders(3, false, rc.grpcHeaders(methodEcho))
	rc.check(rc.fr.WriteData(3, false, msg[:600]))
	rc.check(rc.fr.WriteData(3, true, msg[600:])) // 1700 bytes held
	r := rc.readResponse(3, nil)
	checkStatus(t, r, codes.ResourceExhausted, "too many request bytes")
	rc.check(rc.fr.WriteData(1, true, msg[600:]))
	checkOK(t, rc.readResponse(1, nil), msg)
	waitFor(t, "the bytes to be released", func() bool { return c.state() == connState{} })

	// grpc-go's client reads RESOURCE_EXHAUSTED as it should.
	cc := dial(t, ts)
	_, err := call(testCtx(t), cc, methodEcho, strings.Repeat("m", 2000))
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted {
		t.Errorf("got %v", err)
	}
}

// Shutdown as a raw client sees it: GOAWAY NO_ERROR naming the last
// stream, new streams refused, the call in flight answered, then the end
// of the connection.
func TestShutdownFrames(t *testing.T) {
	b := newBlocker()
	defer b.unblock()
	s := newServer(Options{})
	s.Handle("/test.Test/Block", b.handler())
	ts := startServer(t, s)
	rc := dialRaw(t, ts.addr)
	rc.handshake()
	rc.call(1, "/test.Test/Block", "x")
	b.waitStarted(t, 1)
	shutdown := make(chan error, 1)
	go func() { shutdown <- s.Shutdown(testCtx(t)) }()
	f := rc.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if ga := f.(*http2.GoAwayFrame); ga.ErrCode != http2.ErrCodeNo || ga.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v last %d, want NO_ERROR last 1", ga.ErrCode, ga.LastStreamID)
	}
	rc.call(3, methodEcho, "late")
	rc.expectReset(3, http2.ErrCodeRefusedStream)
	b.unblock()
	r := rc.readResponse(1, nil)
	if r.field("grpc-status") != "0" {
		t.Fatalf("call in flight: %s %s", fieldsString(r.headers), fieldsString(r.trailers))
	}
	rc.expectClosed()
	if err := <-shutdown; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
