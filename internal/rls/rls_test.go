package rls

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/policy/policytest"
	"github.com/portero-rl/portero/store/memstore"
)

const examples = "../../examples/envoy/config"

// t0 is 100 ms into a second, a minute and an hour: windows are predictable.
var t0 = time.Unix(1_800_000_000, 100_000_000)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type env struct {
	client   pb.RateLimitServiceClient
	conn     *grpc.ClientConn
	clock    *clock
	compiler *descriptor.Compiler
}

type setup struct {
	// transport is "grpc-go" (Serve) or "lean" (ServeLean).
	transport string
	store     portero.Store
	compile   descriptor.Options
	onError   portero.FailurePolicy // the engine's; FailError when empty
	svc       ServiceOptions
	limits    *descriptor.Config
	noLimit   bool
}

// newDoor returns the compiler and engine of a service over st.
func newDoor(t testing.TB, st portero.Store, limits *descriptor.Config, o descriptor.Options, onError portero.FailurePolicy) (*descriptor.Compiler, *engine.Engine) {
	t.Helper()
	if onError == "" {
		onError = portero.FailError
	}
	eng, err := engine.New(engine.Options{Store: st, OnError: onError})
	if err != nil {
		t.Fatal(err)
	}
	return descriptor.NewCompiler(limits, o), eng
}

func newMemStore(t testing.TB) portero.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// transports are the two gRPC servers every RLS test runs against.
var transports = []string{"grpc-go", "lean"}

// forEachTransport runs f as a subtest per transport.
func forEachTransport(t *testing.T, f func(t *testing.T, transport string)) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { f(t, tr) })
	}
}

// serveSvc serves svc with options o (ShutdownGrace 1s unless set) on
// lis, or on a loopback port when lis is nil, until the test ends, and
// returns a grpc-go connection to target (the listener's address when
// empty; plaintext unless dial says otherwise).
func serveSvc(t *testing.T, svc *Service, o ServerOptions, lis net.Listener, target string, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = time.Second
	}
	if target == "" {
		target = lis.Addr().String()
	}
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, lis, svc, o) }()
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	return conn
}

// start runs the service on a real server of s.transport on 127.0.0.1:0
// and dials it with grpc-go's client.
func start(t *testing.T, s setup) *env {
	t.Helper()
	if s.store == nil {
		s.store = newMemStore(t)
	}
	if s.limits == nil && !s.noLimit {
		c, err := envoyconf.Load(examples, envoyconf.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s.limits = c
	}
	comp, eng := newDoor(t, s.store, s.limits, s.compile, s.onError)
	clk := &clock{now: t0}
	if s.svc.Now == nil {
		s.svc.Now = clk.Now
	}
	conn := serveSvc(t, NewService(comp, eng, s.svc), ServerOptions{Transport: Transport(s.transport)}, nil, "")
	return &env{client: pb.NewRateLimitServiceClient(conn), conn: conn, clock: clk, compiler: comp}
}

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (e *env) call(t *testing.T, domain string, hits uint32, ds ...*commonv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %v) = %v", domain, ds, err)
	}
	if resp.OverallCode == pb.RateLimitResponse_UNKNOWN {
		t.Fatal("overall_code UNKNOWN")
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

func header(resp *pb.RateLimitResponse, name string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, name) {
			return h.Value
		}
	}
	return ""
}

func TestFixedWindowPerAddress(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport})
		ip := desc("remote_address", "10.0.0.1")
		for i := 1; i <= 10; i++ {
			resp := e.call(t, "edge", 0, ip) // hits_addend 0 means 1
			st := resp.Statuses[0]
			if resp.OverallCode != pb.RateLimitResponse_OK || st.LimitRemaining != uint32(10-i) {
				t.Fatalf("request %d: %v remaining %d, want OK remaining %d", i, resp.OverallCode, st.LimitRemaining, 10-i)
			}
			if st.CurrentLimit.GetRequestsPerUnit() != 10 || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_SECOND || st.CurrentLimit.GetName() != "edge.remote_address" {
				t.Fatalf("current_limit = %v", st.CurrentLimit)
			}
			if got := st.DurationUntilReset.AsDuration(); got != 900*time.Millisecond {
				t.Fatalf("duration_until_reset = %v, want 900ms", got)
			}
		}
		if got, want := header(e.call(t, "edge", 1, ip), "RateLimit-Policy"), `"edge.remote_address";q=10;w=1`; got != want {
			t.Errorf("RateLimit-Policy = %q, want %q", got, want)
		}
		resp := e.call(t, "edge", 1, ip)
		if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("11th request: %v", resp)
		}
		if got, want := header(resp, "RateLimit"), `"edge.remote_address";r=0;t=1`; got != want {
			t.Errorf("RateLimit = %q, want %q", got, want)
		}
		if got := header(resp, "Retry-After"); got != "1" {
			t.Errorf("Retry-After = %q, want 1", got)
		}
		// Another address has its own counter; the next window starts afresh.
		if resp := e.call(t, "edge", 1, desc("remote_address", "10.0.0.2")); resp.OverallCode != pb.RateLimitResponse_OK {
			t.Errorf("other address refused")
		}
		e.clock.Add(900 * time.Millisecond)
		if resp := e.call(t, "edge", 1, ip); resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 9 {
			t.Errorf("next window: %v", resp)
		}
	})
}

func TestMatchingOverGRPC(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport})
		tests := []struct {
			name  string
			d     *commonv3.RateLimitDescriptor
			code  pb.RateLimitResponse_Code
			limit string // current_limit name, "" for none
		}{
			{"blocked address", desc("remote_address", "50.0.0.5"), pb.RateLimitResponse_OVER_LIMIT, "edge.remote_address_50.0.0.5"},
			{"two levels", desc("api_key", "k", "plan", "gold"), pb.RateLimitResponse_OK, "gold"},
			{"partial prefix", desc("api_key", "k"), pb.RateLimitResponse_OK, ""},
			{"too deep", desc("remote_address", "1", "x", "y"), pb.RateLimitResponse_OK, ""},
			{"no match", desc("nothing", "here"), pb.RateLimitResponse_OK, ""},
			{"unlimited", desc("internal", "yes"), pb.RateLimitResponse_OK, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				resp := e.call(t, "edge", 1, tt.d)
				st := resp.Statuses[0]
				if resp.OverallCode != tt.code || st.Code != tt.code || st.CurrentLimit.GetName() != tt.limit {
					t.Errorf("got %v/%v limit %q, want %v limit %q", resp.OverallCode, st.Code, st.CurrentLimit.GetName(), tt.code, tt.limit)
				}
			})
		}
		if st := e.call(t, "edge", 1, desc("internal", "yes")).Statuses[0]; st.LimitRemaining != 1<<32-1 {
			t.Errorf("unlimited: limit_remaining = %d, want MaxUint32", st.LimitRemaining)
		}
		// A blocked address can never pass: no Retry-After.
		resp := e.call(t, "edge", 1, desc("remote_address", "50.0.0.5"))
		if got := header(resp, "Retry-After"); got != "" {
			t.Errorf("blocked: Retry-After = %q, want none", got)
		}
	})
}

// TestAllOrNothing: when one descriptor is over, no descriptor is counted.
func TestAllOrNothing(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport})
		ip, user := desc("remote_address", "10.9.9.9"), desc("api_key", "k", "plan", "free") // 10/s and 60/min
		for i := 0; i < 10; i++ {
			e.call(t, "edge", 1, ip, user)
		}
		// The address is spent: the next requests are refused and must not
		// count against the plan.
		for i := 0; i < 5; i++ {
			resp := e.call(t, "edge", 1, ip, user)
			if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != pb.RateLimitResponse_OK {
				t.Fatalf("refused request %d: %v", i, resp)
			}
			if got := resp.Statuses[1].LimitRemaining; got != 50 {
				t.Fatalf("plan remaining while refused = %d, want 50 (10 counted, refusals not)", got)
			}
			// Only the refusing limit is in RateLimit; both in RateLimit-Policy.
			if got := header(resp, "RateLimit"); got != `"edge.remote_address";r=0;t=1` {
				t.Fatalf("RateLimit = %q", got)
			}
			if got := header(resp, "RateLimit-Policy"); got != `"edge.remote_address";q=10;w=1, "free";q=60;w=60` {
				t.Fatalf("RateLimit-Policy = %q", got)
			}
		}
		if st := e.call(t, "edge", 1, user).Statuses[0]; st.LimitRemaining != 49 {
			t.Errorf("plan alone: remaining %d, want 49", st.LimitRemaining)
		}
		// A blocked descriptor refuses without asking and counts nothing.
		resp := e.call(t, "edge", 1, user, desc("remote_address", "50.0.0.5"))
		if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 49 {
			t.Errorf("with a blocked descriptor: %v", resp)
		}
		if st := e.call(t, "edge", 1, user).Statuses[0]; st.LimitRemaining != 48 {
			t.Errorf("after the blocked request: remaining %d, want 48", st.LimitRemaining)
		}
	})
}

func TestHitsAddend(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport})
		ip := desc("remote_address", "10.1.1.1")
		if st := e.call(t, "edge", 4, ip).Statuses[0]; st.LimitRemaining != 6 {
			t.Fatalf("hits_addend 4: remaining %d, want 6", st.LimitRemaining)
		}
		// Per-descriptor hits_addend overrides the request's.
		d := desc("remote_address", "10.1.1.1")
		d.HitsAddend = wrapperspb.UInt64(3)
		if st := e.call(t, "edge", 4, d).Statuses[0]; st.LimitRemaining != 3 {
			t.Fatalf("descriptor hits_addend 3: remaining %d, want 3", st.LimitRemaining)
		}
		// 0 checks without counting.
		check := desc("remote_address", "10.1.1.1")
		check.HitsAddend = wrapperspb.UInt64(0)
		for i := 0; i < 3; i++ {
			resp := e.call(t, "edge", 1, check)
			if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 3 {
				t.Fatalf("check-only %d: %v", i, resp)
			}
		}
		// A cost larger than what is left is refused and not counted.
		if resp := e.call(t, "edge", 4, ip); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 3 {
			t.Fatalf("cost 4 with 3 left: %v", resp)
		}
		// A cost larger than the limit itself is over, as in
		// envoyproxy/ratelimit, and can never pass: no Retry-After.
		if resp := e.call(t, "edge", 1000, ip); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || header(resp, "Retry-After") != "" {
			t.Fatalf("cost 1000 on 10/s: %v", resp)
		}
		e.call(t, "edge", 3, ip)
		// Now spent: a check-only descriptor is over, still not counted.
		resp := e.call(t, "edge", 1, check)
		if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("check-only when spent: %v", resp)
		}
		// Check-only beside a counted descriptor: only the other one counts.
		other := desc("remote_address", "10.1.1.2")
		free := desc("remote_address", "10.1.1.3")
		free.HitsAddend = wrapperspb.UInt64(0)
		resp = e.call(t, "edge", 2, other, free)
		if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 8 || resp.Statuses[1].LimitRemaining != 10 {
			t.Fatalf("counted + check-only: %v", resp)
		}
	})
}

func TestLimitOverride(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport})
		d := desc("remote_address", "10.2.2.2")
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
		for i := 0; i < 2; i++ {
			resp := e.call(t, "edge", 1, d)
			st := resp.Statuses[0]
			if resp.OverallCode != pb.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE {
				t.Fatalf("override %d: %v", i, resp)
			}
		}
		resp := e.call(t, "edge", 1, d)
		if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("third under 2/min: %v", resp)
		}
		if got, want := resp.Statuses[0].DurationUntilReset.AsDuration(), 20*time.Minute/20-100*time.Millisecond; got != want {
			t.Errorf("duration_until_reset = %v, want %v", got, want)
		}
		// An override does not make an unknown domain known: NOT_FOUND, as
		// for any request there (TestOverridesBounded has the rest).
		d2 := desc("k", "v")
		d2.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
		if _, err := e.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "elsewhere", Descriptors: []*commonv3.RateLimitDescriptor{d2}}); status.Code(err) != codes.NotFound {
			t.Errorf("override in unknown domain: %v, want NOT_FOUND", err)
		}
	})
}

// TestLimitOverridesPerDomain: a caller that fills one domain's overrides
// gets INVALID_ARGUMENT saying that domain is full, the other domains still
// take new ones, and the full domain takes them again once its overrides
// have gone unused (the service's clock, no sleep).
func TestLimitOverridesPerDomain(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport, compile: descriptor.Options{MaxOverrides: 2, OverrideIdle: time.Minute}})
		ask := func(domain string, rpu uint32) error {
			d := desc("user", "alice")
			d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit_SECOND}
			_, err := e.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}})
			return err
		}
		for rpu := range uint32(2) {
			if err := ask("edge", rpu+1); err != nil {
				t.Fatal(err)
			}
		}
		err := ask("edge", 3)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `domain "edge" has 2 limit overrides in use`) {
			t.Fatalf("a third override in edge: %v; want INVALID_ARGUMENT saying edge's overrides are all in use", err)
		}
		if err := ask("api", 3); err != nil {
			t.Fatalf("an override in api while edge is full: %v", err)
		}
		e.clock.Add(time.Minute)
		if err := ask("edge", 3); err != nil {
			t.Fatalf("a third override in edge once its two are unused for a minute: %v", err)
		}
	})
}

func TestShadowReplacesExtension(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport})
		// Shadow mode: 100/hour, never refuses.
		exp := desc("path", "/api/v1/export")
		for i := 0; i < 101; i++ {
			e.call(t, "edge", 1, exp)
		}
		resp := e.call(t, "edge", 1, exp, desc("remote_address", "10.3.3.3"))
		if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].Code != pb.RateLimitResponse_OK {
			t.Fatalf("shadow over its limit refused: %v", resp)
		}
		if resp.Statuses[1].LimitRemaining != 9 {
			t.Errorf("enforced beside a refusing shadow rule: remaining %d, want 9 (counted)", resp.Statuses[1].LimitRemaining)
		}
		if h := header(resp, "RateLimit-Policy"); strings.Contains(h, "export") {
			t.Errorf("shadow rule announced: %q", h)
		}
		// replaces: bulk_sender replaces all_senders when both match.
		resp = e.call(t, "messaging", 1, desc("sender", "bulk-1"), desc("sender", "alice"))
		if resp.Statuses[0].CurrentLimit.GetName() != "bulk_sender" || resp.Statuses[1].CurrentLimit != nil {
			t.Errorf("replaces: %v", resp.Statuses)
		}
		if resp := e.call(t, "messaging", 1, desc("sender", "alice")); resp.Statuses[0].CurrentLimit.GetName() != "all_senders" {
			t.Errorf("without the replacing limit: %v", resp.Statuses)
		}
		// Token bucket with burst 40 from the portero extension.
		u := desc("user", "u1")
		for i := 0; i < 40; i++ {
			if resp := e.call(t, "api", 1, u); resp.OverallCode != pb.RateLimitResponse_OK {
				t.Fatalf("token bucket request %d refused", i)
			}
		}
		resp = e.call(t, "api", 1, u)
		if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("41st request in a burst of 40: %v", resp)
		}
		// A token bucket announces its burst and the time to refill it.
		if got := header(resp, "RateLimit-Policy"); got != `"per_user";q=40;w=4` {
			t.Errorf("RateLimit-Policy = %q", got)
		}
		e.clock.Add(100 * time.Millisecond) // one token at 10/s
		if resp := e.call(t, "api", 1, u); resp.OverallCode != pb.RateLimitResponse_OK {
			t.Errorf("after 100ms at 10/s: %v", resp)
		}
	})
}

func TestBadInput(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport})
		long := strings.Repeat("x", 2000)
		neg := desc("remote_address", "1")
		neg.IsNegativeHits = true
		huge := desc("remote_address", "1")
		huge.HitsAddend = wrapperspb.UInt64(1 << 40)
		badUnit := desc("remote_address", "1")
		badUnit.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
		many := make([]*commonv3.RateLimitDescriptor, 65)
		for i := range many {
			many[i] = desc("k", "v")
		}
		tests := []struct {
			name string
			req  *pb.RateLimitRequest
			code codes.Code
			msg  string
		}{
			{"empty domain", &pb.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}}, codes.InvalidArgument, "domain is required"},
			{"no descriptors", &pb.RateLimitRequest{Domain: "edge"}, codes.InvalidArgument, "at least one descriptor"},
			{"no entries", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{}}}, codes.InvalidArgument, "descriptor 0: at least one entry"},
			{"empty key", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("", "v")}}, codes.InvalidArgument, "empty key"},
			{"long value", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("k", long)}}, codes.InvalidArgument, "longer than"},
			{"too many", &pb.RateLimitRequest{Domain: "edge", Descriptors: many}, codes.InvalidArgument, "at most 64"},
			{"absurd hits", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{huge}}, codes.InvalidArgument, "hits_addend 1099511627776"},
			{"negative hits", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{neg}}, codes.InvalidArgument, "is_negative_hits"},
			{"override unit", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{badUnit}}, codes.InvalidArgument, "limit override"},
			{"unknown domain", &pb.RateLimitRequest{Domain: "nope", Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}}, codes.NotFound, `unknown domain "nope" (configured: api, edge, messaging)`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := e.client.ShouldRateLimit(context.Background(), tt.req)
				if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
					t.Errorf("err = %v, want %v containing %q", err, tt.code, tt.msg)
				}
			})
		}
	})
}

func TestUnknownDomainAllowed(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport, compile: descriptor.Options{AllowUnknownDomains: true}})
		resp := e.call(t, "nope", 1, desc("a", "b"))
		if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
			t.Errorf("unknown domain with AllowUnknownDomains: %v", resp)
		}
	})
}

func TestStoreFailurePolicies(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		boom := fmt.Errorf("redis down: %w", portero.ErrStoreUnavailable)
		for _, tt := range []struct {
			policy portero.FailurePolicy
			code   codes.Code
			answer pb.RateLimitResponse_Code
		}{
			{portero.FailError, codes.Unavailable, 0},
			{portero.FailAllow, codes.OK, pb.RateLimitResponse_OK},
			{portero.FailDeny, codes.OK, pb.RateLimitResponse_OVER_LIMIT},
			{portero.FailLocal, codes.OK, pb.RateLimitResponse_OK},
		} {
			t.Run(tt.policy.String(), func(t *testing.T) {
				st := &policytest.Store{}
				st.SetErr(boom)
				e := start(t, setup{transport: transport, store: st, onError: tt.policy})
				resp, err := e.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "1"), desc("nothing", "x")}})
				if status.Code(err) != tt.code {
					t.Fatalf("err = %v, want %v", err, tt.code)
				}
				if err != nil {
					if !strings.Contains(err.Error(), "redis down") {
						t.Errorf("error hides the cause: %v", err)
					}
					return
				}
				if resp.OverallCode != tt.answer {
					t.Errorf("overall_code = %v, want %v", resp.OverallCode, tt.answer)
				}
				// The failure policy's figures are no shared count: no
				// current_limit, no RateLimit item, RateLimit-Policy kept.
				if resp.Statuses[0].CurrentLimit != nil || header(resp, "RateLimit") != "" || header(resp, "RateLimit-Policy") != `"edge.remote_address";q=10;w=1` {
					t.Errorf("%s: %v", tt.policy, resp)
				}
				if tt.policy == portero.FailDeny && (resp.Statuses[1].Code != pb.RateLimitResponse_OK || header(resp, "Retry-After") != "1") {
					t.Errorf("deny: unmatched descriptor or Retry-After wrong: %v", resp)
				}
				// Bad input is still an error, not a policy answer.
				_, err = e.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "nope", Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}})
				if status.Code(err) != codes.NotFound {
					t.Errorf("unknown domain under %v: %v", tt.policy, err)
				}
			})
		}
	})
}

// slowStore blocks until the call's context ends.
type slowStore struct{ portero.Store }

func (slowStore) AllowAll(ctx context.Context, _ time.Time, _ []portero.Hit) ([]portero.Decision, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("%w: %w", portero.ErrStoreUnavailable, ctx.Err())
}

func (slowStore) Peek(ctx context.Context, _ portero.Rule, _ string, _ time.Time, cost int64) (portero.Decision, error) {
	<-ctx.Done()
	return portero.Decision{}, fmt.Errorf("%w: %w", portero.ErrStoreUnavailable, ctx.Err())
}

func TestDeadlines(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport, store: slowStore{}, svc: ServiceOptions{CallTimeout: 50 * time.Millisecond}})
		req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "1")}}
		begin := time.Now()
		_, err := e.client.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.Unavailable || time.Since(begin) > 2*time.Second {
			t.Errorf("server-side timeout: %v after %v, want UNAVAILABLE after ~50ms", err, time.Since(begin))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond) // Envoy's default
		defer cancel()
		_, err = e.client.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("client deadline: %v, want DEADLINE_EXCEEDED", err)
		}
	})
}

func TestHealthReflectionGracefulStop(t *testing.T) {
	st := newMemStore(t)
	c, _ := envoyconf.Load(examples, envoyconf.Options{})
	comp, eng := newDoor(t, st, c, descriptor.Options{}, "")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, lis, NewService(comp, eng, ServiceOptions{}), ServerOptions{ShutdownGrace: time.Second})
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", ServiceName, HealthName} {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q = %v, %v", svc, r, err)
		}
	}
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if !strings.Contains(strings.Join(names, " "), ServiceName) {
		t.Errorf("reflection lists %v, want %s", names, ServiceName)
	}
	rc.CloseSend()
	// Graceful stop: a call in flight finishes, Serve returns nil.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after cancel = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if _, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}}); err == nil {
		t.Error("call after stop succeeded")
	}
}

func TestConcurrentCallsExact(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		// 200 concurrent calls on one 10/s key: exactly 10 pass.
		e := start(t, setup{transport: transport})
		var mu sync.Mutex
		ok := 0
		var wg sync.WaitGroup
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := e.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "10.7.7.7")}})
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == pb.RateLimitResponse_OK {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if ok != 10 {
			t.Errorf("%d of 200 concurrent calls passed a 10/s limit, want 10", ok)
		}
	})
}

func TestReload(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		e := start(t, setup{transport: transport})
		c, err := envoyconf.Parse([]envoyconf.Source{{Name: "new.yaml", Data: []byte("domain: edge\ndescriptors:\n  - {key: remote_address, rate_limit: {unit: second, requests_per_unit: 1}}\n")}}, envoyconf.Options{})
		if err != nil {
			t.Fatal(err)
		}
		e.compiler.SetLimits(c)
		ip := desc("remote_address", "10.8.8.8")
		e.call(t, "edge", 1, ip)
		if resp := e.call(t, "edge", 1, ip); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Errorf("after reload to 1/s: %v", resp)
		}
		if _, err := e.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}}); status.Code(err) != codes.NotFound {
			t.Errorf("removed domain: %v", err)
		}
	})
}
