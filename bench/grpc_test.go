package bench

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/grpclimit"
	"github.com/portero-rl/portero/internal/grpctest"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// Portero's gRPC interceptor beside go-grpc-middleware's ratelimit
// interceptor with golang.org/x/time/rate behind it (its documented use:
// one limiter for the whole server, no key), allowed and refused unary
// calls, in one run. docs/grpc.md records the figures of
//
//	cd bench && go test -run '^$' -bench 'GRPC' -benchtime 20000x -count 5 .
//
// Subjects:
//   - portero: a token bucket per API key (x-api-key metadata), the
//     RateLimit metadata on every answer, ResourceExhausted with RetryInfo,
//     QuotaFailure and the pushback trailer on a refusal;
//   - ggm-xrate: one rate.Limiter for every call; a refusal is
//     ResourceExhausted with a message and nothing else.

// xrateLimiter is go-grpc-middleware's Limiter over x/time/rate.
type xrateLimiter struct{ l *rate.Limiter }

var errLimited = errors.New("rate limited")

func (x xrateLimiter) Limit(context.Context) error {
	if !x.l.Allow() {
		return errLimited
	}
	return nil
}

// grpcSubjects returns each subject's interceptor, allowing everything or
// refusing everything.
func grpcSubjects(b *testing.B) map[string]grpc.UnaryServerInterceptor {
	st, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close(context.Background()) })
	limited := func(limit portero.Limit) grpc.UnaryServerInterceptor {
		p, err := policy.New([]policy.Rule{{Name: "per-key", Key: policy.MustParseKey("header:X-Api-Key"), Algorithm: portero.TokenBucket, Limit: limit}}, policy.Options{})
		if err != nil {
			b.Fatal(err)
		}
		l, err := grpclimit.New(grpclimit.Config{Policy: p, Store: st})
		if err != nil {
			b.Fatal(err)
		}
		return l.Unary
	}
	refusing := rate.NewLimiter(0, 0)
	return map[string]grpc.UnaryServerInterceptor{
		"portero-allowed":   limited(portero.PerSecond(1e9)),
		"portero-refused":   limited(portero.Limit{Count: 1, Window: 1000 * time.Hour, Burst: 1}),
		"ggm-xrate-allowed": ratelimit.UnaryServerInterceptor(xrateLimiter{rate.NewLimiter(rate.Inf, 0)}),
		"ggm-xrate-refused": ratelimit.UnaryServerInterceptor(xrateLimiter{refusing}),
	}
}

var grpcOrder = []string{"portero-allowed", "ggm-xrate-allowed", "portero-refused", "ggm-xrate-refused"}

// stream is the transport stream an interceptor's SetHeader and SetTrailer
// reach, as inside a server: it keeps what it is given.
type stream struct{ header, trailer metadata.MD }

func (*stream) Method() string                    { return grpctest.Say }
func (s *stream) SetHeader(md metadata.MD) error  { s.header = md; return nil }
func (s *stream) SendHeader(md metadata.MD) error { s.header = md; return nil }
func (s *stream) SetTrailer(md metadata.MD) error { s.trailer = md; return nil }

// BenchmarkGRPCInterceptor calls each interceptor as grpc-go's server does,
// without the network: a context with the call's incoming metadata, its
// peer and its transport stream; the handler does nothing.
func BenchmarkGRPCInterceptor(b *testing.B) {
	subjects := grpcSubjects(b)
	info := &grpc.UnaryServerInfo{FullMethod: grpctest.Say}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	req := wrapperspb.String("hi")
	for _, name := range grpcOrder {
		icpt := subjects[name]
		b.Run(name, func(b *testing.B) {
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(":authority", "api.example", "x-api-key", "k-1", "content-type", "application/grpc"))
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5000}})
			ctx = grpc.NewContextWithServerTransportStream(ctx, &stream{})
			_, _ = icpt(ctx, req, info, handler) // the key's first decision
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, _ = icpt(ctx, req, info, handler)
			}
		})
	}
}

// BenchmarkGRPCLoopback is a whole unary call through a real grpc-go server
// and client on 127.0.0.1, one at a time, for each subject; cpu-ns/op is the
// process's CPU time (user + system: client and server) per call, which
// depends little on what else runs on the machine.
func BenchmarkGRPCLoopback(b *testing.B) {
	subjects := grpcSubjects(b)
	for _, name := range grpcOrder {
		b.Run(name, func(b *testing.B) {
			cc := grpctest.Dial(b, grpctest.Start(b, grpctest.Handlers{}, grpc.ChainUnaryInterceptor(subjects[name])))
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k-1")
			_, _ = grpctest.CallSay(ctx, cc, "hi") // connect, and the key's first decision
			before := cpuTime()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, _ = grpctest.CallSay(ctx, cc, "hi")
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
