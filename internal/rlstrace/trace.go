// Package rlstrace traces `portero rls`'s calls with OpenTelemetry as
// envoyproxy/ratelimit does with TRACING_ENABLED: a server span per gRPC
// call from the otelgrpc instrumentation (the caller's trace continued
// from its traceparent or B3 headers), and inside it the span of the
// service, "ShouldRateLimit Execution", with the attributes
// envoyproxy/ratelimit gives it (domain, and "request string", the request
// in protobuf's text form), exported over OTLP (http or grpc, the standard
// OTEL_EXPORTER_OTLP_* variables saying where) in batches, sampled by
// TRACING_SAMPLING_RATE unless the caller's trace decided, under the
// resource TRACING_SERVICE_NAME, _NAMESPACE and _INSTANCE_ID name.
//
// It uses OpenTelemetry's SDK, exporters and gRPC instrumentation
// (go.opentelemetry.io/otel, go.opentelemetry.io/contrib), as
// envoyproxy/ratelimit does: the span model, sampling, batching and OTLP
// are theirs. Only `portero rls` links it; with tracing off nothing of it
// runs on a call.
package rlstrace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.7.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero/descriptor"
)

// Options are envoyproxy/ratelimit's TRACING_* settings.
type Options struct {
	// Protocol is the OTLP exporter's: http (the default) or grpc.
	Protocol string
	// ServiceName, ServiceNamespace and ServiceInstanceID name the
	// resource; an empty instance id is a random UUID, as there.
	ServiceName, ServiceNamespace, ServiceInstanceID string
	// SamplingRate is the share of new traces recorded: 1 or more all, 0
	// or less none; a caller's sampled trace is always continued.
	SamplingRate float64
}

// Tracer is one process's tracing.
type Tracer struct {
	provider   *sdktrace.TracerProvider
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

// New starts the exporter and the tracer provider; Shutdown flushes them.
func New(ctx context.Context, o Options) (*Tracer, error) {
	var client otlptrace.Client
	switch o.Protocol {
	case "http", "":
		client = otlptracehttp.NewClient()
	case "grpc":
		client = otlptracegrpc.NewClient()
	default:
		return nil, fmt.Errorf("tracing exporter protocol %q: want http or grpc", o.Protocol)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	id := o.ServiceInstanceID
	if id == "" {
		id = randomUUID()
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceNameKey.String(o.ServiceName),
		semconv.ServiceNamespaceKey.String(o.ServiceNamespace), semconv.ServiceInstanceIDKey.String(id))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SamplingRate))),
		sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracer{provider: tp, tracer: tp.Tracer("ratelimit"),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, b3.New(), propagation.Baggage{})}, nil
}

// Shutdown exports what is left and stops.
func (t *Tracer) Shutdown(ctx context.Context) error { return t.provider.Shutdown(ctx) }

// ServerOption is the gRPC server's instrumentation: a server span per
// call, continuing the caller's trace.
func (t *Tracer) ServerOption() grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(t.provider), otelgrpc.WithPropagators(t.propagator)))
}

// Start implements rls.Tracer: the service's span of one call.
func (t *Tracer) Start(ctx context.Context, req *descriptor.Request) (context.Context, func()) {
	ctx, span := t.tracer.Start(ctx, "ShouldRateLimit Execution", trace.WithAttributes(attribute.String("domain", req.Domain)))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("request string", requestString(req)))
	}
	return ctx, func() { span.End() }
}

// requestString is the request as envoyproxy/ratelimit's request.String()
// writes it: protobuf's text form of the RateLimitRequest.
func requestString(req *descriptor.Request) string {
	m := &pb.RateLimitRequest{Domain: req.Domain, HitsAddend: req.Hits}
	for _, d := range req.Descriptors {
		pd := &rlv3.RateLimitDescriptor{IsNegativeHits: d.Negative}
		for _, e := range d.Entries {
			pd.Entries = append(pd.Entries, &rlv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		if o := d.Override; o != nil {
			pd.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: o.RequestsPerUnit, Unit: typev3.RateLimitUnit(o.Unit)}
		}
		if d.Hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.Hits)
		}
		m.Descriptors = append(m.Descriptors, pd)
	}
	return prototext.MarshalOptions{}.Format(m)
}

// randomUUID is a version 4 UUID.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
