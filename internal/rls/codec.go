package rls

import (
	"context"
	"sync"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// One protobuf codec for both transports: on grpc-go, wire.go decodes
// RateLimitRequest and encodes RateLimitResponse too, plugged in as the
// server's codec (grpc.ForceServerCodecV2) with a ShouldRateLimit handler
// of its own (wireServiceDesc) whose messages are a wireCall instead of
// the generated types. Every other message (health, reflection) goes to
// grpc-go's proto codec. It saves the generic unmarshal, the conversion
// both ways and proto.Marshal, and the generated response's allocations:
// BenchmarkCodec and docs/benchmarks-rls.md have the figures.
//
// An interceptor or stats handler, should one be added, sees a *wireCall
// as the request and the reply, not the generated types.

// wireCall is one ShouldRateLimit call on grpc-go: the serialized
// request, which wireCodec.Unmarshal keeps referenced until the handler
// has decoded it, and the serialized answer that wireCodec.Marshal hands
// to grpc-go, which frees the call.
type wireCall struct {
	in  mem.Buffer // the RateLimitRequest; nil once decoded
	out []byte     // the RateLimitResponse, owned by grpc-go once marshalled
}

var wireCallPool = sync.Pool{New: func() any { return new(wireCall) }}

// release gives the request's buffer back to grpc-go's pool.
func (c *wireCall) release() {
	if c.in != nil {
		c.in.Free()
		c.in = nil
	}
}

func (c *wireCall) free() {
	c.release()
	*c = wireCall{}
	wireCallPool.Put(c)
}

// wireCodec is grpc-go's proto codec but for wireCall.
type wireCodec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

// Name is "proto": the codec speaks protobuf, as the content-type says.
func (wireCodec) Name() string { return proto.Name }

func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	c, ok := v.(*wireCall)
	if !ok {
		return protoCodec.Marshal(v)
	}
	out := c.out
	c.free()
	return mem.BufferSlice{mem.SliceBuffer(out)}, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c, ok := v.(*wireCall)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	// grpc-go frees data once this returns: the call holds a reference
	// until the handler has decoded it. A malformed request is answered
	// with its status (INVALID_ARGUMENT) by the handler, as on the lean
	// transport; an error returned here would be grpc-go's INTERNAL.
	if len(data) == 1 {
		data[0].Ref()
		c.in = data[0]
	} else {
		c.in = data.MaterializeToBuffer(mem.DefaultBufferPool())
	}
	return nil
}

// wireServiceDesc registers ShouldRateLimit with wireShouldRateLimit; the
// name and the proto file are the generated service's, so that
// reflection describes it as usual.
var wireServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: wireShouldRateLimit}},
	Metadata:    pb.RateLimitService_ServiceDesc.Metadata,
}

// responseCap is the first capacity of an answer's buffer: one status and
// the RateLimit headers fit.
const responseCap = 256

func wireShouldRateLimit(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Service)
	c := wireCallPool.Get().(*wireCall)
	if err := dec(c); err != nil {
		c.free()
		return nil, err
	}
	var out any
	var err error
	if interceptor == nil {
		// No closure here: it would be one more allocation per call.
		out, err = s.wireHandle(ctx, c)
	} else {
		out, err = interceptor(ctx, c, &grpc.UnaryServerInfo{Server: srv, FullMethod: methodShouldRateLimit},
			func(ctx context.Context, _ any) (any, error) { return s.wireHandle(ctx, c) })
	}
	if err != nil {
		c.free()
		return nil, err
	}
	return out, nil
}

// wireHandle answers c's request into c.
func (s *Service) wireHandle(ctx context.Context, c *wireCall) (any, error) {
	out, err := s.ShouldRateLimit(ctx, c.in.ReadOnlyData(), make([]byte, 0, responseCap))
	c.release()
	if err != nil {
		return nil, err
	}
	c.out = out
	return c, nil
}
