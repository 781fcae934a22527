package rls

import (
	"context"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/portero-rl/portero/internal/h2grpc"
)

// BenchmarkCodec is ShouldRateLimit over loopback through grpc-go's
// client, 64 calls in flight, on both transports, with the server's
// protobuf coded by wire.go (what Server runs) and by the generated types:
// proto.Unmarshal, then proto.Marshal or, built with -tags vtprotobuf,
// go-control-plane's vtprotobuf marshalling (MarshalVTStrict; it has no
// unmarshalling). Both servers of a transport have the same options, and
// the client's share is the same in all, so the difference is the
// server's codec. cpu-µs/op is the process's CPU time (user and system,
// client and server) per call, which depends less than ns/op on what else
// runs on a shared machine.
//
//	go test -run '^$' -bench 'Codec$' -benchtime 20000x -count 5 ./internal/rls
//	go test -tags vtprotobuf -run '^$' -bench 'Codec$' -benchtime 20000x -count 5 ./internal/rls
func BenchmarkCodec(b *testing.B) {
	for _, tr := range []Transport{TransportGRPC, TransportLean} {
		for _, generated := range []bool{false, true} {
			name := string(tr) + "/wire"
			if generated {
				name = string(tr) + "/" + generatedCodec
			}
			b.Run(name, func(b *testing.B) {
				svc := benchService(b, newMemStore(b), ServiceOptions{})
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				defer serveCodec(svc, lis, tr, generated)()
				benchCalls(b, lis.Addr().String())
			})
		}
	}
}

// serveCodec serves svc on lis with the transport and codec asked for,
// until the function it returns is called.
func serveCodec(svc *Service, lis net.Listener, tr Transport, generated bool) (stop func()) {
	if tr == TransportLean {
		srv := h2grpc.NewServer(h2grpc.Options{})
		if generated {
			srv.Handle(methodShouldRateLimit, func(ctx context.Context, msg, out []byte) ([]byte, error) {
				var in pb.RateLimitRequest
				if err := proto.Unmarshal(msg, &in); err != nil {
					return nil, err
				}
				resp, err := generatedShouldRateLimit(svc, ctx, &in)
				if err != nil {
					return nil, err
				}
				return marshalAppend(out, resp)
			})
		} else {
			srv.Handle(methodShouldRateLimit, svc.ShouldRateLimit)
		}
		go srv.Serve(lis)
		return func() { srv.Close() }
	}
	var gs *grpc.Server
	if generated {
		gs = grpc.NewServer(grpc.ForceServerCodecV2(generatedGRPCCodec{}))
		pb.RegisterRateLimitServiceServer(gs, generatedServer{svc: svc})
	} else {
		gs = grpc.NewServer(grpc.ForceServerCodecV2(wireCodec{}))
		gs.RegisterService(&wireServiceDesc, svc)
	}
	go gs.Serve(lis)
	return gs.Stop
}

// generatedGRPCCodec is grpc-go's proto codec with marshalAppend for the
// responses.
type generatedGRPCCodec struct{}

func (generatedGRPCCodec) Name() string { return "proto" }

func (generatedGRPCCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*pb.RateLimitResponse)
	if !ok {
		return protoCodec.Marshal(v)
	}
	out, err := marshalAppend(nil, m)
	return mem.BufferSlice{mem.SliceBuffer(out)}, err
}

func (generatedGRPCCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return protoCodec.Unmarshal(data, v)
}

// benchCalls makes b.N calls to the server at addr, 64 in flight.
func benchCalls(b *testing.B, addr string) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewRateLimitServiceClient(cc)
	ins := make([]*pb.RateLimitRequest, benchKeys)
	for i := range ins {
		ins[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: benchValues[i]}}},
		}}
	}
	ctx := context.Background()
	if _, err := client.ShouldRateLimit(ctx, ins[0]); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(64 / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			out, err := client.ShouldRateLimit(ctx, ins[next.Add(1)%benchKeys])
			if err != nil || len(out.ResponseHeadersToAdd) != 2 {
				b.Error(out, err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
}

// BenchmarkCodecMessage is BenchmarkCodec's server side without the
// network: one request decoded, decided on a store that answers at once
// (nopStore) and its answer encoded, by wire.go and by the generated
// types.
//
//	go test -run '^$' -bench CodecMessage -benchmem -count 5 ./internal/rls
func BenchmarkCodecMessage(b *testing.B) {
	svc := benchService(b, nopStore{}, ServiceOptions{CallTimeout: 2 * time.Hour})
	msg, err := proto.Marshal(&pb.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: benchValues[1]}}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		var out []byte
		for b.Loop() {
			if out, err = svc.ShouldRateLimit(ctx, msg, out[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(generatedCodec, func(b *testing.B) {
		b.ReportAllocs()
		var out []byte
		for b.Loop() {
			var in pb.RateLimitRequest
			if err := proto.Unmarshal(msg, &in); err != nil {
				b.Fatal(err)
			}
			resp, err := generatedShouldRateLimit(svc, ctx, &in)
			if err != nil {
				b.Fatal(err)
			}
			if out, err = marshalAppend(out[:0], resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
