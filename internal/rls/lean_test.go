package rls

import (
	"context"
	"net"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/h2grpc"
)

// The lean transport's health service, what it does not serve, and its
// graceful stop, through grpc-go's client (TestHealthReflectionGracefulStop
// is the grpc-go transport's).
func TestLeanHealthGracefulStop(t *testing.T) {
	c, err := envoyconf.Load(examples, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	comp, eng := newDoor(t, newMemStore(t), c, descriptor.Options{}, "")
	srv, hs := newLeanServer(NewService(comp, eng, ServiceOptions{}), h2grpc.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	check := func(svc string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		return r.GetStatus(), err
	}
	for _, svc := range []string{"", ServiceName, HealthName} {
		if st, err := check(svc); err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) = %v, %v; want SERVING", svc, st, err)
		}
	}
	if _, err := check("no.such.Service"); status.Code(err) != codes.NotFound {
		t.Fatalf("Check of an unknown service = %v, want NOT_FOUND", err)
	}
	// Streaming methods are the grpc-go transport's: UNIMPLEMENTED here.
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("Watch = %v, want UNIMPLEMENTED", err)
	}
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err == nil {
		_, err = rc.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection = %v, want UNIMPLEMENTED", err)
	}
	// Shutting down: NOT_SERVING, then the server stops gracefully.
	hs.Shutdown()
	if st, err := check(""); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Check after Shutdown = %v, %v; want NOT_SERVING", st, err)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := <-served; err != h2grpc.ErrServerClosed {
		t.Fatalf("Serve = %v, want ErrServerClosed", err)
	}
	req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}}
	if _, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req); err == nil {
		t.Error("call after stop succeeded")
	}
}
