package h2grpc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// These tests speak HTTP/2 frame by frame (rawClient), to send what a
// well-behaved client never would and to check the exact frames the
// server answers with.

func checkOK(t *testing.T, r *response, want []byte) {
	t.Helper()
	if r.wasReset {
		t.Fatalf("stream reset: %v", r.reset)
	}
	if r.field(":status") != "200" || r.field("content-type") != "application/grpc" || r.field("grpc-status") != "0" {
		t.Fatalf("headers %s trailers %s", fieldsString(r.headers), fieldsString(r.trailers))
	}
	if !bytes.Equal(r.data, want) {
		t.Fatalf("answer %d bytes, want %d", len(r.data), len(want))
	}
}

func checkStatus(t *testing.T, r *response, code codes.Code, msgPart string) {
	t.Helper()
	if r.wasReset {
		t.Fatalf("stream reset %v, want grpc-status %v", r.reset, code)
	}
	if r.field("grpc-status") != fmt.Sprint(int(code)) || !strings.Contains(r.field("grpc-message"), msgPart) {
		t.Fatalf("got %s %s, want grpc-status %d with %q", fieldsString(r.headers), fieldsString(r.trailers), code, msgPart)
	}
}

func TestRawCall(t *testing.T) {
	ts := startServer(t, newServer(Options{MaxConcurrentStreams: 7, MaxHeaderListSize: 5000}))
	rc := dialRaw(t, ts.addr)
	settings := rc.handshake()
	if settings[http2.SettingMaxConcurrentStreams] != 7 || settings[http2.SettingMaxHeaderListSize] != 5000 {
		t.Errorf("server settings %v", settings)
	}
	rc.call(1, methodEcho, "hi")
	checkOK(t, rc.readResponse(1, nil), grpcMessage("hi"))

	// Headers split over HEADERS and CONTINUATION frames.
	block := rc.grpcHeaders(methodEcho, "x-pad", strings.Repeat("p", 3000))
	rc.check(rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block[:100]}))
	rc.check(rc.fr.WriteContinuation(3, false, block[100:1000]))
	rc.check(rc.fr.WriteContinuation(3, true, block[1000:]))
	rc.check(rc.fr.WriteData(3, true, grpcMessage("continued")))
	checkOK(t, rc.readResponse(3, nil), grpcMessage("continued"))

	// PING is answered with the same data; SETTINGS is acknowledged.
	rc.check(rc.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}))
	f := rc.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok })
	if p := f.(*http2.PingFrame); !p.IsAck() || p.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Errorf("PING answer %v", p)
	}
	rc.check(rc.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20}))
	f = rc.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.SettingsFrame); return ok })
	if !f.(*http2.SettingsFrame).IsAck() {
		t.Error("SETTINGS not acknowledged")
	}

	// The request in several DATA frames, one of them empty and one
	// padded, and the client's own trailers ending it.
	msg := grpcMessage(strings.Repeat("d", 40000))
	rc.writeHeaders(5, false, rc.grpcHeaders(methodEcho))
	rc.check(rc.fr.WriteData(5, false, msg[:3]))
	rc.check(rc.fr.WriteData(5, false, nil))
	rc.check(rc.fr.WriteDataPadded(5, false, msg[3:16000], make([]byte, 200)))
	rc.check(rc.fr.WriteData(5, false, msg[16000:32000]))
	rc.check(rc.fr.WriteData(5, false, msg[32000:]))
	rc.writeHeaders(5, true, rc.headers("x-trailer", "t"))
	checkOK(t, rc.readResponse(5, nil), msg)

	// The client going away still gets the answers to calls it made.
	rc.call(7, methodEcho, "last")
	rc.check(rc.fr.WriteGoAway(0, http2.ErrCodeNo, nil))
	checkOK(t, rc.readResponse(7, nil), grpcMessage("last"))
}

func TestBadPreface(t *testing.T) {
	ts := startServer(t, newServer(Options{}))
	// An HTTP/1.1 request: the connection is closed.
	rc := dialRaw(t, ts.addr)
	if _, err := io.WriteString(rc.nc, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	rc.expectClosed()

	// The preface, then something else than SETTINGS.
	rc = dialRaw(t, ts.addr)
	io.WriteString(rc.nc, http2.ClientPreface)
	rc.check(rc.fr.WritePing(false, [8]byte{}))
	rc.expectGoAway(http2.ErrCodeProtocol)

	// The server still serves.
	rc = dialRaw(t, ts.addr)
	rc.handshake()
	rc.call(1, methodEcho, "ok")
	checkOK(t, rc.readResponse(1, nil), grpcMessage("ok"))
}

func TestHandshakeTimeout(t *testing.T) {
	ts := startServer(t, newServer(Options{HandshakeTimeout: 500 * time.Millisecond}))
	// Nothing sent at all.
	rc := dialRaw(t, ts.addr)
	rc.expectClosed()
	// Half of the preface.
	rc = dialRaw(t, ts.addr)
	io.WriteString(rc.nc, http2.ClientPreface[:10])
	rc.expectClosed()
	// The preface and no SETTINGS.
	rc = dialRaw(t, ts.addr)
	io.WriteString(rc.nc, http2.ClientPreface)
	rc.expectClosed()
	waitFor(t, "the connections to be forgotten", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return len(ts.conns) == 0
	})
	// After the handshake the deadline no longer applies.
	rc = dialRaw(t, ts.addr)
	rc.handshake()
	time.Sleep(300 * time.Millisecond) // three handshake timeouts, idle
	rc.call(1, methodEcho, "still here")
	checkOK(t, rc.readResponse(1, nil), grpcMessage("still here"))
}

func TestHTTPErrors(t *testing.T) {
	ts := startServer(t, newServer(Options{}))
	rc := dialRaw(t, ts.addr)
	rc.handshake()
	checkPlain := func(id uint32, status string) {
		t.Helper()
		r := rc.readResponse(id, nil)
		if r.wasReset || r.field(":status") != status || !strings.HasPrefix(r.field("content-type"), "text/plain") || !bytes.Equal(r.data, plainBody) {
			t.Fatalf("stream %d: reset %v %v, headers %s, body %q; want %s", id, r.wasReset, r.reset, fieldsString(r.headers), r.data, status)
		}
	}
	base := func(method, ct string) []string {
		return []string{":method", method, ":scheme", "http", ":path", methodEcho, ":authority", "x", "content-type", ct}
	}
	rc.writeHeaders(1, true, rc.headers(base("GET", "application/grpc")...))
	checkPlain(1, "405")
	rc.writeHeaders(3, true, rc.headers(base("POST", "application/json")...))
	checkPlain(3, "415")
	// Answered once the request ends, its body dropped.
	rc.writeHeaders(5, false, rc.headers(base("POST", "text/plain")...))
	rc.check(rc.fr.WriteData(5, false, []byte("hello ")))
	rc.check(rc.fr.WriteData(5, true, []byte("world")))
	checkPlain(5, "415")
	rc.writeHeaders(7, true, rc.headers(base("POST", "application/grpcx")...))
	checkPlain(7, "415")
	rc.writeHeaders(9, true, rc.headers(base("PUT", "application/grpc")...))
	checkPlain(9, "405")
	// gRPC's content-type may have a codec suffix or parameters, in any
	// case.
	for i, ct := range []string{"application/grpc+proto", "Application/GRPC", "application/grpc; charset=utf-8"} {
		id := uint32(11 + 2*i)
		rc.writeHeaders(id, false, rc.headers(base("POST", ct)...))
		rc.check(rc.fr.WriteData(id, true, grpcMessage(ct)))
		checkOK(t, rc.readResponse(id, nil), grpcMessage(ct))
	}
	// content-length must match the DATA, on calls and on other requests.
	msg := grpcMessage("len")
	rc.writeHeaders(17, false, rc.headers(append(base("POST", "application/grpc"), "content-length", fmt.Sprint(len(msg)))...))
	rc.check(rc.fr.WriteData(17, true, msg))
	checkOK(t, rc.readResponse(17, nil), msg)
	rc.writeHeaders(19, false, rc.headers(append(base("POST", "application/grpc"), "content-length", fmt.Sprint(len(msg)+1))...))
	rc.check(rc.fr.WriteData(19, true, msg))
	rc.expectReset(19, http2.ErrCodeProtocol)
	rc.writeHeaders(21, false, rc.headers(append(base("POST", "application/json"), "content-length", "1")...))
	rc.check(rc.fr.WriteData(21, true, []byte("{}")))
	rc.expectReset(21, http2.ErrCodeProtocol)
	rc.writeHeaders(23, true, rc.headers(append(base("POST", "application/grpc"), "content-length", "x")...))
	rc.expectReset(23, http2.ErrCodeProtocol)
	// A body longer than the stream's window (1 MiB, never granted back
	// for a request that is not a call) is answered before its end, then
	// the stream reset.
	rc.writeHeaders(25, false, rc.headers(base("POST", "text/plain")...))
	chunk := make([]byte, 16384)
	for range 64 {
		rc.check(rc.fr.WriteData(25, false, chunk))
	}
	r := rc.readResponse(25, nil)
	if r.field(":status") != "415" || r.wasReset {
		t.Fatalf("long body: headers %s, reset %v", fieldsString(r.headers), r.wasReset)
	}
	rc.expectReset(25, http2.ErrCodeNo)
	rc.call(27, methodEcho, "after")
	checkOK(t, rc.readResponse(27, nil), grpcMessage("after"))
}

func TestMaxHeaderListSize(t *testing.T) {
	ts := startServer(t, newServer(Options{MaxHeaderListSize: 1000}))
	rc := dialRaw(t, ts.addr)
	rc.handshake()
	big := strings.Repeat("b", 400)
	rc.writeHeaders(1, true, rc.grpcHeaders(methodEcho, "x-1", big, "x-2", big, "x-3", big))
	r := rc.readResponse(1, nil)
	if r.field(":status") != "431" || !bytes.Equal(r.data, plainBody431) {
		t.Fatalf("headers %s, body %q; want 431", fieldsString(r.headers), r.data)
	}
	// HPACK stays in sync: the next call is served, with those fields
	// now in the dynamic table.
	rc.call(3, methodEcho, "small")
	checkOK(t, rc.readResponse(3, nil), grpcMessage("small"))

	// One field longer than the whole limit is refused by the Framer's
	// HPACK decoder itself (as in Go's own HTTP/2 server): the
	// connection ends with COMPRESSION_ERROR.
	rc.writeHeaders(5, true, rc.grpcHeaders(methodEcho, "x-big", strings.Repeat("b", 1500)))
	rc.expectGoAway(http2.ErrCodeCompression)
}

func TestGRPCRequestErrors(t *testing.T) {
	ts := startServer(t, newServer(Options{}))
	rc := dialRaw(t, ts.addr)
	rc.handshake()
	id := uint32(1)
	next := func() uint32 { id += 2; return id - 2 }

	s := next()
	rc.writeHeaders(s, false, rc.grpcHeaders(methodEcho, "grpc-encoding", "gzip"))
	rc.check(rc.fr.WriteData(s, true, grpcMessage("x")))
	checkStatus(t, rc.readResponse(s, nil), codes.Unimplemented, "gzip")

	s = next()
	rc.writeHeaders(s, false, rc.grpcHeaders(methodEcho, "grpc-timeout", "12345678901S"))
	rc.check(rc.fr.WriteData(s, true, grpcMessage("x")))
	checkStatus(t, rc.readResponse(s, nil), codes.Internal, "grpc-timeout")

	s = next()
	rc.writeHeaders(s, true, rc.grpcHeaders(methodEcho))
	checkStatus(t, rc.readResponse(s, nil), codes.Internal, "no message")

	s = next()
	compressed := grpcMessage("x")
	compressed[0] = 1
	rc.writeHeaders(s, false, rc.grpcHeaders(methodEcho))
	rc.check(rc.fr.WriteData(s, true, compressed))
	checkStatus(t, rc.readResponse(s, nil), codes.Internal, "compressed")

	s = next()
	rc.writeHeaders(s, false, rc.grpcHeaders(methodEcho))
	rc.check(rc.fr.WriteData(s, true, append(grpcMessage("a"), grpcMessage("b")...)))
	checkStatus(t, rc.readResponse(s, nil), codes.Internal, "exactly one message")

	s = next()
	rc.writeHeaders(s, false, rc.grpcHeaders(methodEcho))
	rc.check(rc.fr.WriteData(s, true, grpcMessage("a")[:4]))
	checkStatus(t, rc.readResponse(s, nil), codes.Internal, "no message")

	// Trailers with a pseudo-header are malformed.
	s = next()
	rc.writeHeaders(s, false, rc.grpcHeaders(methodEcho))
	rc.check(rc.fr.WriteData(s, false, grpcMessage("a")))
	rc.writeHeaders(s, true, rc.headers(":path", "/x"))
	rc.expectReset(s, http2.ErrCodeProtocol)

	// A timeout the handler sees as its context's deadline.
	deadlines := make(chan time.Duration, 1)
	ts.Handle("/test.Test/Deadline", func(ctx context.Context, msg, out []byte) ([]byte, error) {
		d, _ := ctx.Deadline()
		deadlines <- time.Until(d)
		return out, nil
	})
	s = next()
	rc.writeHeaders(s, false, rc.grpcHeaders("/test.Test/Deadline", "grpc-timeout", "3H"))
	rc.check(rc.fr.WriteData(s, true, grpcMessage("")))
	checkOK(t, rc.readResponse(s, nil), []byte{0, 0, 0, 0, 0})
	if d := <-deadlines; d < 2*time.Hour || d > 3*time.Hour {
		t.Errorf("grpc-timeout 3H gave the handler %v", d)
	}

	// Malformed header blocks reset their stream; HPACK stays in sync and
	// the connection serves on.
	for _, fields := range [][]string{
		{":method", "POST", ":scheme", "http", ":path", methodEcho, "Upper-Case", "x"},
		{":method", "POST", ":path", methodEcho, ":authority", "x"},
		{":method", "POST", ":scheme", "http", ":path", ""},
		{":method", "POST", ":scheme", "http", ":path", methodEcho, ":status", "200"},
		{":method", "POST", ":scheme", "http", ":path", methodEcho, ":method", "POST"},
		{":method", "POST", ":scheme", "http", "x-regular", "1", ":path", methodEcho},
		{":method", "POST", ":scheme", "http", ":path", methodEcho, ":unknown", "1"},
		{":method", "POST", ":scheme", "http", ":path", methodEcho, "connection", "keep-alive"},
		{":method", "POST", ":scheme", "http", ":path", methodEcho, "te", "gzip"},
	} {
		s = next()
		rc.writeHeaders(s, true, rc.headers(fields...))
		rc.expectReset(s, http2.ErrCodeProtocol)
	}
	s = next()
	rc.call(s, methodEcho, "fine")
	checkOK(t, rc.readResponse(s, nil), grpcMessage("fine"))
}

// grpc-message is percent-encoded on the wire: bytes outside printable
// ASCII and '%' (gRPC's HTTP/2 protocol spec), cut to 1024 bytes.
func TestGRPCMessageWire(t *testing.T) {
	s := newServer(Options{})
	s.Handle("/test.Test/Fail", func(_ context.Context, msg, _ []byte) ([]byte, error) {
		return nil, status.Error(codes.Aborted, string(msg))
	})
	ts := startServer(t, s)
	rc := dialRaw(t, ts.addr)
	rc.handshake()
	for i, tc := range []struct{ msg, wire string }{
		{"plain ASCII ~!", "plain ASCII ~!"},
		{"100% ✓\r\n\x00\x7f", "100%25 %E2%9C%93%0D%0A%00%7F"},
		{strings.Repeat("x", 1030), strings.Repeat("x", 1024)},
	} {
		id := uint32(2*i + 1)
		rc.writeHeaders(id, false, rc.grpcHeaders("/test.Test/Fail"))
		raw := []byte(tc.msg)
		rc.check(rc.fr.WriteData(id, true, append([]byte{0, 0, 0, byte(len(raw) >> 8), byte(len(raw))}, raw...)))
		r := rc.readResponse(id, nil)
		if got := r.field("grpc-message"); got != tc.wire || r.field("grpc-status") != "10" {
			t.Errorf("%q: grpc-message %q, want %q", tc.msg, got, tc.wire)
		}
	}
}

// Connection errors: each case on a new connection, which gets GOAWAY
// with the code and is closed.
func TestConnectionErrors(t *testing.T) {
	ts := startServer(t, newServer(Options{}))
	for _, tc := range []struct {
		name string
		code http2.ErrCode
		send func(rc *rawClient)
	}{
		{"DATA on an idle stream", http2.ErrCodeProtocol, func(rc *rawClient) {
			rc.check(rc.fr.WriteData(5, true, []byte("x")))
		}},
		{"HEADERS on an even stream", http2.ErrCodeProtocol, func(rc *rawClient) {
			rc.writeHeaders(2, true, rc.grpcHeaders(methodEcho))
		}},
		{"stream id going down", http2.ErrCodeProtocol, func(rc *rawClient) {
			rc.call(5, methodEcho, "a")
			rc.readResponse(5, nil)
			rc.call(3, methodEcho, "b")
		}},
		{"RST_STREAM on an idle stream", http2.ErrCodeProtocol, func(rc *rawClient) {
			rc.check(rc.fr.WriteRSTStream(9, http2.ErrCodeCancel))
		}},
		{"WINDOW_UPDATE on an idle stream", http2.ErrCodeProtocol, func(rc *rawClient) {
			rc.check(rc.fr.WriteWindowUpdate(9, 100))
		}},
		{"connection window above 2^31-1", http2.ErrCodeFlowControl, func(rc *rawClient) {
			rc.check(rc.fr.WriteWindowUpdate(0, 1<<31-1))
		}},
		{"zero WINDOW_UPDATE on the connection", http2.ErrCodeProtocol, func(rc *rawClient) {
			rc.check(rc.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, 0, []byte{0, 0, 0, 0}))
		}},
		{"zero WINDOW_UPDATE on a stream", http2.ErrCodeProtocol, func(rc *rawClient) {
			rc.writeHeaders(1, false, rc.grpcHeaders(methodEcho))
			rc.check(rc.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, 1, []byte{0, 0, 0, 0}))
		}},
		{"initial window above 2^31-1", http2.ErrCodeFlowControl, func(rc *rawClient) {
			rc.check(rc.fr.WriteRawFrame(http2.FrameSettings, 0, 0, []byte{0, 4, 0x80, 0, 0, 0}))
		}},
		{"HEADERS padding longer than the frame", http2.ErrCodeProtocol, func(rc *rawClient) {
			// Its header block is never decoded: the connection cannot
			// go on (HPACK would be out of sync).
			block := rc.grpcHeaders(methodEcho)
			rc.check(rc.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersPadded, 1, append([]byte{byte(len(block) + 1)}, block...)))
		}},
		{"PUSH_PROMISE from a client", http2.ErrCodeProtocol, func(rc *rawClient) {
			rc.check(rc.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: rc.headers(":method", "GET"), EndHeaders: true}))
		}},
		{"frame larger than MAX_FRAME_SIZE", http2.ErrCodeFrameSize, func(rc *rawClient) {
			rc.writeHeaders(1, false, rc.grpcHeaders(methodEcho))
			rc.check(rc.fr.WriteRawFrame(http2.FrameData, 0, 1, make([]byte, 16385)))
		}},
		{"CONTINUATION without HEADERS", http2.ErrCodeProtocol, func(rc *rawClient) {
			rc.check(rc.fr.WriteContinuation(1, true, rc.grpcHeaders(methodEcho)))
		}},
		{"HEADERS on a half-closed (remote) stream", http2.ErrCodeStreamClosed, func(rc *rawClient) {
			rc.writeHeaders(1, false, rc.grpcHeaders("/test.Test/Block"))
			rc.check(rc.fr.WriteData(1, true, grpcMessage("x")))
			rc.writeHeaders(1, true, rc.headers("x-late", "1"))
		}},
		{"invalid HPACK", http2.ErrCodeCompression, func(rc *rawClient) {
			rc.writeHeaders(1, true, []byte{0xff, 0xff, 0xff, 0xff, 0x0f})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.Handle("/test.Test/Block", func(ctx context.Context, msg, out []byte) ([]byte, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			})
			rc := dialRaw(t, ts.addr)
			rc.t = t
			rc.handshake()
			tc.send(rc)
			rc.expectGoAway(tc.code)
		})
	}
}

// TestShutdownAnswersAdmittedStreams: a stream the GOAWAY covers is
// answered before the connection closes, also when the answer is an early
// error and the stream was the last one open (the answer is queued before
// the stream stops counting, so the draining connection cannot close in
// between), and also for a stream that only finished its request after
// the GOAWAY.
func TestShutdownAnswersAdmittedStreams(t *testing.T) {
	s := newServer(Options{})
	ts := startServer(t, s)
	rc := dialRaw(t, ts.addr)
	rc.handshake()
	rc.writeHeaders(1, false, rc.grpcHeaders(methodEcho))
	rc.writeHeaders(3, false, rc.grpcHeaders(methodEcho))
	// Both streams are open on the server once a PING sent after them
	// comes back.
	rc.check(rc.fr.WritePing(false, [8]byte{7}))
	rc.readUntil(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(testCtx(t)) }()
	ga := rc.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if ga.LastStreamID != 3 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("GOAWAY last stream %d %v, want 3 NO_ERROR", ga.LastStreamID, ga.ErrCode)
	}
	// Stream 1 completes normally; stream 3, the last one open, carries a
	// bad length prefix and is answered INTERNAL.
	rc.check(rc.fr.WriteData(1, true, grpcMessage("one")))
	checkOK(t, rc.readResponse(1, nil), grpcMessage("one"))
	bad := grpcMessage("three")
	bad[4]++
	rc.check(rc.fr.WriteData(3, true, bad))
	r := rc.readResponse(3, nil)
	if got := r.field("grpc-status"); got != strconv.Itoa(int(codes.Internal)) {
		t.Fatalf("stream 3: grpc-status %q (%s), want INTERNAL", got, fieldsString(r.trailers))
	}
	rc.expectClosed()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Shutdown did not return")
	}
}
