package h2grpc

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzConn feeds arbitrary bytes, after a valid preface and SETTINGS, to a
// server connection: whatever a peer sends, the server must not panic,
// must not hang, and must let the connection and Serve end on Close.
func FuzzConn(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		s := newServer(Options{MaxConcurrentStreams: 4, MaxRecvMsgSize: 1 << 10, MaxHeaderListSize: 1 << 10, HandshakeTimeout: time.Second})
		l := newPipeListener()
		served := make(chan error, 1)
		go func() { served <- s.Serve(l) }()
		cli := l.dial()
		drained := make(chan struct{})
		go func() { io.Copy(io.Discard, cli); close(drained) }()
		var pre bytes.Buffer
		pre.WriteString(http2.ClientPreface)
		http2.NewFramer(&pre, nil).WriteSettings()
		cli.SetWriteDeadline(time.Now().Add(5 * time.Second))
		// The server may close the connection at any point of the input,
		// but it must keep reading until it does.
		if _, err := cli.Write(append(pre.Bytes(), input...)); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the server stopped reading without closing the connection: %v", err)
		}
		s.Close()
		cli.Close()
		select {
		case err := <-served:
			if !errors.Is(err, ErrServerClosed) {
				t.Fatalf("Serve = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after Close")
		}
		select {
		case <-drained:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection did not end after Close")
		}
	})
}

// fuzzSeeds are frame sequences a client sends: a whole call, a call in
// pieces with CONTINUATION, PING, WINDOW_UPDATE, RST_STREAM, PRIORITY,
// SETTINGS and GOAWAY.
func fuzzSeeds() [][]byte {
	block := func(fields ...string) []byte {
		var b bytes.Buffer
		e := hpack.NewEncoder(&b)
		for i := 0; i+1 < len(fields); i += 2 {
			e.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return b.Bytes()
	}
	call := block(":method", "POST", ":scheme", "http", ":path", methodEcho, ":authority", "x",
		"content-type", "application/grpc", "te", "trailers", "grpc-timeout", "1S")
	msg := grpcMessage("hello")
	var seeds [][]byte
	add := func(write func(fr *http2.Framer)) {
		var b bytes.Buffer
		write(http2.NewFramer(&b, nil))
		seeds = append(seeds, b.Bytes())
	}
	add(func(fr *http2.Framer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: call, EndHeaders: true})
		fr.WriteData(1, true, msg)
	})
	add(func(fr *http2.Framer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: call[:5]})
		fr.WriteContinuation(1, true, call[5:])
		fr.WriteData(1, false, msg[:3])
		fr.WriteData(1, true, msg[3:])
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: call, EndHeaders: true, EndStream: true})
	})
	add(func(fr *http2.Framer) {
		fr.WritePing(false, [8]byte{1, 2, 3})
		fr.WriteWindowUpdate(0, 1000)
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: call, EndHeaders: true})
		fr.WriteData(1, true, msg)
		fr.WriteWindowUpdate(1, 10)
		fr.WriteRSTStream(1, http2.ErrCodeCancel)
		fr.WritePriority(5, http2.PriorityParam{StreamDep: 5})
		fr.WriteGoAway(1, http2.ErrCodeNo, nil)
	})
	return seeds
}
