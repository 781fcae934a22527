package h2grpc

import (
	"net"
	"testing"

	"golang.org/x/net/http2"
)

// BenchmarkUnary measures small unary calls over one loopback connection,
// 64 in flight, from a raw HTTP/2 client cheaper than grpc-go's: most of
// the time and allocations are the server's.
//
//	go test -run '^$' -bench Unary -benchmem ./internal/h2grpc
func BenchmarkUnary(b *testing.B) {
	s := newServer(Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(lis)
	defer s.Close()
	rc := dialRaw(b, lis.Addr().String())
	rc.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	rc.check(rc.fr.WriteWindowUpdate(0, 1<<30))
	msg := grpcMessage("a small request, as Envoy's are")
	const inFlight = 64
	sem := make(chan struct{}, inFlight)
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for range b.N {
			for {
				f, err := rc.readErr(waitTimeout)
				if err != nil {
					done <- err
					return
				}
				if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamEnded() {
					break
				}
			}
			<-sem
		}
		done <- nil
	}()
	for i := range b.N {
		sem <- struct{}{}
		id := uint32(2*i + 1)
		if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.grpcHeaders(methodEcho), EndHeaders: true}); err != nil {
			b.Fatal(err)
		}
		if err := rc.fr.WriteData(id, true, msg); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
