package rls

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/portero-rl/portero/internal/h2grpc"
	"github.com/portero-rl/portero/internal/quote"
)

// The lean transport serves the same Service over internal/h2grpc instead
// of grpc-go: ShouldRateLimit and the health service's Check, the two
// unary methods Envoy calls, at about a third of grpc-go's server CPU per
// call (docs/benchmarks-rls.md). Server reflection and health Watch are
// streaming methods and exist only on the grpc-go transport.

// Full method names served by the lean transport.
const (
	methodShouldRateLimit = "/" + ServiceName + "/ShouldRateLimit"
	methodHealthCheck     = "/grpc.health.v1.Health/Check"
)

// leanHealthState is the health state the lean transport answers Check with.
type leanHealthState struct{ notServing, namedNotServing atomic.Bool }

// Shutdown makes every Check answer NOT_SERVING.
func (h *leanHealthState) Shutdown() { h.notServing.Store(true) }

// setNamed sets the status of ServiceName and HealthName (Server.SetServing).
func (h *leanHealthState) setNamed(serving bool) { h.namedNotServing.Store(!serving) }

func (h *leanHealthState) check(_ context.Context, msg, out []byte) ([]byte, error) {
	var in healthpb.HealthCheckRequest
	if err := proto.Unmarshal(msg, &in); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "malformed HealthCheckRequest: %v", err)
	}
	if in.Service != "" && in.Service != ServiceName && in.Service != HealthName {
		return nil, status.Errorf(codes.NotFound, "unknown service %s", quote.Input(in.Service))
	}
	st := healthpb.HealthCheckResponse_SERVING
	if h.notServing.Load() || in.Service != "" && h.namedNotServing.Load() {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	return proto.MarshalOptions{}.MarshalAppend(out, &healthpb.HealthCheckResponse{Status: st})
}

// newLeanServer returns an h2grpc server with ShouldRateLimit and the
// health Check (SERVING for "", ServiceName and HealthName) registered, and the health
// state so that the caller can flip it on shutdown.
func newLeanServer(svc *Service, o h2grpc.Options) (*h2grpc.Server, *leanHealthState) {
	srv := h2grpc.NewServer(o)
	hs := new(leanHealthState)
	srv.Handle(methodShouldRateLimit, svc.ShouldRateLimit)
	srv.Handle(methodHealthCheck, hs.check)
	return srv, hs
}
