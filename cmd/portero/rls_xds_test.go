package main

import (
	"context"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/testenv"
)

// xdsServer is a go-control-plane management server on loopback with a
// snapshot cache, recording what its clients acknowledge and refuse.
type xdsServer struct {
	addr  string
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	acked map[string]bool // versions ACKed
	nacks []string        // error details of NACKs
}

func startXDSServer(t *testing.T) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), acked: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	srv := serverv3.NewServer(ctx, x.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoverygrpc.DiscoveryRequest) error {
			x.mu.Lock()
			defer x.mu.Unlock()
			if d := req.GetErrorDetail(); d != nil {
				x.nacks = append(x.nacks, d.GetMessage())
			} else if req.GetVersionInfo() != "" {
				x.acked[req.GetVersionInfo()] = true
			}
			return nil
		}})
	gs := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(func() { gs.Stop(); cancel() })
	x.addr = lis.Addr().String()
	return x
}

// push makes configs the node's snapshot at version.
func (x *xdsServer) push(t *testing.T, node, version string, configs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

func (x *xdsServer) waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		x.mu.Lock()
		ok := done()
		x.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the management server saw no %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func perHour(key string, n uint32) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{Key: key, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: n}}
}

// TestRatelimitXDS runs the binary as envoyproxy/ratelimit's image runs it
// with the configuration over xDS (CONFIG_TYPE=GRPC_XDS_SOTW and its
// CONFIG_GRPC_XDS_* settings, as Envoy Gateway sets them) against a real
// go-control-plane management server: the answers follow the first
// configuration and then an update, both ACKed; a bad update is NACKed
// with the reason, logged, and the last good configuration keeps
// answering.
func TestRatelimitXDS(t *testing.T) {
	x := startXDSServer(t)
	x.push(t, "rls-1", "v1", &rlsconf.RateLimitConfig{Name: "edge-config", Domain: "edge",
		Descriptors: []*rlsconf.RateLimitDescriptor{perHour("remote_address", 2)}})
	envoyproxyRuntime(t, redistest.Start(t), "", "CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL", x.addr,
		"CONFIG_GRPC_XDS_NODE_ID", "rls-1", "CONFIG_GRPC_XDS_NODE_METADATA", "zone=a", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "50ms")
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &testenv.Buffer{}, &testenv.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, argsOf([]string{"/bin/ratelimit"}), out, errOut) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("ratelimit did not stop")
		}
	})
	re := regexp.MustCompile(`gRPC listening on grpc://(\S+) `)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == ""; {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no gRPC address; stderr: %s", errOut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	x.waitFor(t, "ACK of v1", func() bool { return x.acked["v1"] })
	call := func(ip string) *pb.RateLimitResponse {
		t.Helper()
		resp, err := ask(t, addr, &pb.RateLimitRequest{Domain: "edge", Descriptors: []*pbDesc{{Entries: []*pbEntry{{Key: "remote_address", Value: ip}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if r := call("10.0.0.1"); r.OverallCode != want || r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 2 {
			t.Fatalf("v1 call %d = %v, want %v under 2 per hour", i, r, want)
		}
	}

	x.push(t, "rls-1", "v2", &rlsconf.RateLimitConfig{Name: "edge-config", Domain: "edge",
		Descriptors: []*rlsconf.RateLimitDescriptor{perHour("remote_address", 5)}})
	x.waitFor(t, "ACK of v2", func() bool { return x.acked["v2"] })
	if r := call("10.0.0.2"); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 5 {
		t.Fatalf("after v2: %v, want OK under 5 per hour", r)
	}

	// The same key twice at one level: a configuration error there.
	x.push(t, "rls-1", "v3", &rlsconf.RateLimitConfig{Name: "edge-config", Domain: "edge",
		Descriptors: []*rlsconf.RateLimitDescriptor{perHour("remote_address", 1), perHour("remote_address", 9)}})
	x.waitFor(t, "NACK of v3", func() bool { return len(x.nacks) > 0 })
	x.mu.Lock()
	nack, acked3 := x.nacks[0], x.acked["v3"]
	x.mu.Unlock()
	if acked3 || !strings.Contains(nack, "edge-config") {
		t.Errorf("v3: acked %v, NACK %q: want a NACK naming the resource", acked3, nack)
	}
	if r := call("10.0.0.3"); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 5 {
		t.Errorf("after the refused v3: %v, want v2's 5 per hour", r)
	}
	if logs := errOut.String(); !strings.Contains(logs, "keeping the running configuration") || !strings.Contains(logs, "edge-config") {
		t.Errorf("the refused update is not logged:\n%s", logs)
	}
}
