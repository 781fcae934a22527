// Package grpctest is a small gRPC service for tests that need a real
// grpc-go server and client (the gRPC door, its polite client, the
// acceptance test of every door, the benchmarks): one unary method and one
// client-streaming method over protobuf's well-known StringValue, so that
// no generated code is needed. Servers listen on 127.0.0.1 and stop when
// the test ends.
package grpctest

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The service and its methods' full names.
const (
	Service = "portero.test.Echo"
	Say     = "/" + Service + "/Say"
	Upload  = "/" + Service + "/Upload"
)

// Handlers are the service's behaviour; nil fields have defaults: Say
// answers its message, Upload counts the messages it receives and answers
// their number.
type Handlers struct {
	Say    func(ctx context.Context, in string) (string, error)
	Upload func(ss grpc.ServerStream) error
}

// UploadStream is the stream description of Upload, for
// grpc.ClientConn.NewStream.
var UploadStream = grpc.StreamDesc{StreamName: "Upload", ClientStreams: true}

// Desc returns the service's description with h behind it, for
// grpc.Server.RegisterService(desc, nil).
func Desc(h Handlers) *grpc.ServiceDesc {
	if h.Say == nil {
		h.Say = func(_ context.Context, in string) (string, error) { return in, nil }
	}
	if h.Upload == nil {
		h.Upload = CountUpload
	}
	return &grpc.ServiceDesc{
		ServiceName: Service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Say", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			say := func(ctx context.Context, req any) (any, error) {
				out, err := h.Say(ctx, req.(*wrapperspb.StringValue).GetValue())
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(out), nil
			}
			if icpt == nil {
				return say(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: Say}, say)
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "Upload", ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error { return h.Upload(ss) }}},
	}
}

// CountUpload receives every message of the stream and answers how many
// came, as a decimal StringValue.
func CountUpload(ss grpc.ServerStream) error {
	n := 0
	for {
		var m wrapperspb.StringValue
		err := ss.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			return ss.SendMsg(wrapperspb.String(strconv.Itoa(n)))
		}
		if err != nil {
			return err
		}
		n++
	}
}

// Start serves the service with h on a new 127.0.0.1 listener and returns
// its address; the server stops when the test ends.
func Start(t testing.TB, h Handlers, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(Desc(h), nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		stopped := make(chan struct{})
		go func() { srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			srv.Stop()
		}
		<-done
	})
	return lis.Addr().String()
}

// Dial connects to addr without TLS; the connection closes when the test
// ends.
func Dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// CallSay calls Say with in and returns its answer.
func CallSay(ctx context.Context, cc grpc.ClientConnInterface, in string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, Say, wrapperspb.String(in), out, opts...)
	return out.GetValue(), err
}

// CallUpload streams msgs to Upload and returns its answer.
func CallUpload(ctx context.Context, cc grpc.ClientConnInterface, msgs []string, opts ...grpc.CallOption) (string, error) {
	cs, err := cc.NewStream(ctx, &UploadStream, Upload, opts...)
	if err != nil {
		return "", err
	}
	for _, m := range msgs {
		if err := cs.SendMsg(wrapperspb.String(m)); err != nil {
			break // the server ended the stream: RecvMsg says why
		}
	}
	if err := cs.CloseSend(); err != nil {
		return "", err
	}
	out := new(wrapperspb.StringValue)
	if err := cs.RecvMsg(out); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}
