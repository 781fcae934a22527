package server_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/internal/rlstrace"
	"github.com/portero-rl/portero/internal/server"
)

// otlpReceiver is an OTLP/gRPC trace collector on loopback keeping every
// span it is sent.
type otlpReceiver struct {
	coltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	calls int
}

func (o *otlpReceiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// startOTLP starts a receiver and points the OTLP exporter at it, as
// OTEL_EXPORTER_OTLP_ENDPOINT does for envoyproxy/ratelimit.
func startOTLP(t *testing.T) *otlpReceiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &otlpReceiver{}
	gs := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(gs, o)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	return o
}

func tracedCalls(t *testing.T, addr string, n int) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func attr(s *tracepb.Span, key string) (string, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue(), true
		}
	}
	return "", false
}

// TestRLSTracing: with tracing on, every ShouldRateLimit reaches a real
// OTLP receiver as envoyproxy/ratelimit's spans: the gRPC server span and,
// inside it, "ShouldRateLimit Execution" with the domain and the request
// in protobuf's text form; with tracing off nothing is sent.
func TestRLSTracing(t *testing.T) {
	compat := server.EnvoyproxyOptions{Compat: &rls.Compat{Headers: rls.HeadersNone}, Counting: engine.CountEach}
	t.Run("on", func(t *testing.T) {
		o := startOTLP(t)
		r := startRLS(t, server.RLSOptions{Envoyproxy: compat,
			Tracing: &rlstrace.Options{Protocol: "grpc", ServiceName: "RateLimit", SamplingRate: 1}})
		tracedCalls(t, strings.TrimPrefix(r.grpc, "grpc://"), 3)
		if err := r.stop(t); err != nil { // the provider's shutdown exports the batch
			t.Fatal(err)
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		server, inner := map[string]*tracepb.Span{}, 0
		for _, s := range o.spans {
			if s.Name == "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" && s.Kind == tracepb.Span_SPAN_KIND_SERVER {
				server[string(s.SpanId)] = s
			}
		}
		for _, s := range o.spans {
			if s.Name != "ShouldRateLimit Execution" {
				continue
			}
			inner++
			if d, _ := attr(s, "domain"); d != "edge" {
				t.Errorf("span domain = %q, want edge", d)
			}
			if rs, _ := attr(s, "request string"); !strings.Contains(rs, `domain:"edge"`) || !strings.Contains(rs, `value:"10.0.0.1"`) {
				t.Errorf("span request string = %q", rs)
			}
			if server[string(s.ParentSpanId)] == nil {
				t.Errorf("ShouldRateLimit Execution is not a child of the gRPC server span")
			}
		}
		if inner != 3 || len(server) != 3 {
			t.Errorf("spans: %d ShouldRateLimit Execution and %d server spans, want 3 and 3 (of %d)", inner, len(server), len(o.spans))
		}
	})
	t.Run("off", func(t *testing.T) {
		o := startOTLP(t)
		r := startRLS(t, server.RLSOptions{Envoyproxy: compat})
		tracedCalls(t, strings.TrimPrefix(r.grpc, "grpc://"), 3)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.calls != 0 {
			t.Errorf("tracing off: %d exports, %d spans received", o.calls, len(o.spans))
		}
	})
}
