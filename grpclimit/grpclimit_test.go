package grpclimit_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/grpclimit"
	"github.com/portero-rl/portero/internal/grpctest"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// t0 is 10 s into a minute: 50 s to the end of a fixed window.
var t0 = time.Unix(1_800_000_000, 0).Truncate(time.Minute).Add(10 * time.Second)

func store(t *testing.T) *memstore.Store {
	t.Helper()
	st, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st
}

func newPolicy(t *testing.T, rules ...policy.Rule) *policy.Policy {
	t.Helper()
	p, err := policy.New(rules, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serve starts the test service behind a Limiter of cfg on 127.0.0.1 and
// returns a client connection to it.
func serve(t *testing.T, cfg grpclimit.Config, h grpctest.Handlers, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	l, err := grpclimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, grpc.ChainUnaryInterceptor(l.Unary), grpc.ChainStreamInterceptor(l.Stream))
	return grpctest.Dial(t, grpctest.Start(t, h, opts...))
}

// answer is what a client saw of one call.
type answer struct {
	code       codes.Code
	policy     string // ratelimit-policy, from the header or (refused) the trailer
	ratelimit  string
	pushback   string
	retryDelay time.Duration // RetryInfo; -1 when absent
	violations []*errdetails.QuotaFailure_Violation
	message    string
}

func say(t *testing.T, cc *grpc.ClientConn, md ...string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	var hdr, tr metadata.MD
	_, err := grpctest.CallSay(ctx, cc, "hi", grpc.Header(&hdr), grpc.Trailer(&tr))
	return read(err, hdr, tr)
}

func read(err error, hdr, tr metadata.MD) answer {
	st := status.Convert(err)
	a := answer{code: st.Code(), retryDelay: -1, message: st.Message()}
	all := metadata.Join(hdr, tr)
	a.policy = strings.Join(all.Get("ratelimit-policy"), ", ")
	a.ratelimit = strings.Join(all.Get("ratelimit"), ", ")
	a.pushback = strings.Join(tr.Get(grpclimit.PushbackKey), ",")
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			a.retryDelay = d.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			a.violations = d.GetViolations()
		}
	}
	return a
}

// TestStackedLimits: a real grpc-go server and client on loopback, a limit
// per method and one per API key (metadata x-api-key) stacked on it, all or
// nothing: the key's refusal counts nothing under the method's limit; each
// refusal is ResourceExhausted with RetryInfo, a QuotaFailure naming the
// rule in words, the pushback trailer and the RateLimit fields.
func TestStackedLimits(t *testing.T) {
	p := newPolicy(t,
		policy.Rule{Name: "per-method", Match: policy.Match{Path: grpctest.Say}, Key: policy.MustParseKey("global"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(3)},
		policy.Rule{Name: "per-key", Match: policy.Match{Path: "/portero.test.Echo/*"}, Key: policy.MustParseKey("header:X-Api-Key"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(2)},
	)
	cc := serve(t, grpclimit.Config{Policy: p, Store: store(t), Now: func() time.Time { return t0 }}, grpctest.Handlers{})
	both := `"per-method";q=3;w=60, "per-key";q=2;w=60`
	for i, step := range []struct {
		key  string
		want answer
	}{
		{"a", answer{code: codes.OK, policy: both, ratelimit: `"per-method";r=2;t=50, "per-key";r=1;t=50`}},
		{"a", answer{code: codes.OK, policy: both, ratelimit: `"per-method";r=1;t=50, "per-key";r=0;t=50`}},
		{"a", answer{code: codes.ResourceExhausted, policy: both, ratelimit: `"per-key";r=0;t=50`, pushback: "50000", retryDelay: 50 * time.Second}},
		// The refusal above counted nothing under per-method: b still passes.
		{"b", answer{code: codes.OK, policy: both, ratelimit: `"per-method";r=0;t=50, "per-key";r=1;t=50`}},
		{"c", answer{code: codes.ResourceExhausted, policy: both, ratelimit: `"per-method";r=0;t=50`, pushback: "50000", retryDelay: 50 * time.Second}},
	} {
		got := say(t, cc, "x-api-key", step.key)
		if got.code != step.want.code || got.policy != step.want.policy || got.ratelimit != step.want.ratelimit ||
			got.pushback != step.want.pushback || step.want.code != codes.OK && got.retryDelay != step.want.retryDelay {
			t.Errorf("call %d (key %s): %+v\nwant %+v", i, step.key, got, step.want)
		}
		if step.want.code == codes.OK {
			continue
		}
		rule := map[string]string{"a": "per-key", "c": "per-method"}[step.key]
		want := `rule "` + rule + `" allows`
		if len(got.violations) != 1 || got.violations[0].GetSubject() != rule || !strings.HasPrefix(got.violations[0].GetDescription(), want) ||
			!strings.HasSuffix(got.violations[0].GetDescription(), "retry in 50 s") || got.message != got.violations[0].GetDescription() {
			t.Errorf("call %d: QuotaFailure %v, message %q: want one violation of %s, %q…retry in 50 s", i, got.violations, got.message, rule, want)
		}
	}
}

// TestNeverPasses: a cost above what the rule admits at once is refused
// as one that can never pass: no RetryInfo, pushback -1 (do not retry), a
// QuotaFailure that says so; a malformed cost is InvalidArgument.
func TestNeverPasses(t *testing.T) {
	cost, err := policy.ParseCost("header:X-Cost")
	if err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t, policy.Rule{Name: "tokens", Key: policy.MustParseKey("global"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(5), Cost: cost})
	cc := serve(t, grpclimit.Config{Policy: p, Store: store(t), Now: func() time.Time { return t0 }}, grpctest.Handlers{})
	got := say(t, cc, "x-cost", "6")
	if got.code != codes.ResourceExhausted || got.retryDelay != -1 || got.pushback != "-1" || len(got.violations) != 1 ||
		!strings.Contains(got.violations[0].GetDescription(), "costs 6: it can never pass") {
		t.Errorf("cost 6 of 5: %+v, want ResourceExhausted, no RetryInfo, pushback -1, a violation that can never pass", got)
	}
	if got := say(t, cc, "x-cost", "two"); got.code != codes.InvalidArgument {
		t.Errorf("a malformed cost: %v %q, want InvalidArgument", got.code, got.message)
	}
	if got := say(t, cc, "x-cost", "5"); got.code != codes.OK || got.ratelimit != `"tokens";r=0;t=50` {
		t.Errorf("cost 5 of 5: %+v, want allowed with r=0", got)
	}
}

// TestTrustedProxy: the client address comes from x-forwarded-for metadata
// only when the peer is a trusted proxy, walked from the right as clientip
// walks the HTTP header; a forged one from an untrusted peer is ignored.
func TestTrustedProxy(t *testing.T) {
	p := newPolicy(t, policy.Rule{Name: "per-ip", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1)})
	var seen []netip.Addr
	l, err := grpclimit.New(grpclimit.Config{Policy: p, Store: store(t), Now: func() time.Time { return t0 },
		ClientIP: clientip.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := grpclimit.New(grpclimit.Config{Policy: p, Store: store(t), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	record := func(l *grpclimit.Limiter) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			seen = append(seen, l.Request(ctx, info.FullMethod, req).ClientIP)
			return l.Unary(ctx, req, info, h)
		}
	}
	trustedCC := grpctest.Dial(t, grpctest.Start(t, grpctest.Handlers{}, grpc.UnaryInterceptor(record(l))))
	untrustedCC := grpctest.Dial(t, grpctest.Start(t, grpctest.Handlers{}, grpc.UnaryInterceptor(record(untrusted))))
	for _, c := range []struct {
		cc   *grpc.ClientConn
		xff  string
		want string
		code codes.Code
	}{
		{trustedCC, "6.6.6.6, 203.0.113.1, 127.0.0.9", "203.0.113.1", codes.OK},
		{trustedCC, "203.0.113.1", "203.0.113.1", codes.ResourceExhausted}, // the same client: its limit is spent
		{trustedCC, "203.0.113.2", "203.0.113.2", codes.OK},
		{untrustedCC, "203.0.113.3", "127.0.0.1", codes.OK}, // forged: the peer counts
		{untrustedCC, "203.0.113.4", "127.0.0.1", codes.ResourceExhausted},
	} {
		seen = seen[:0]
		got := say(t, c.cc, "x-forwarded-for", c.xff)
		if len(seen) != 1 || seen[0].String() != c.want || got.code != c.code {
			t.Errorf("x-forwarded-for %q: client %v, %v; want %s, %v", c.xff, seen, got.code, c.want, c.code)
		}
	}
}

// TestIdentity: a key from the identity the application sets in the
// context (policy.WithIdentity in an interceptor before the limiter).
func TestIdentity(t *testing.T) {
	p := newPolicy(t, policy.Rule{Name: "per-tenant", Key: policy.MustParseKey("tenant"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1)})
	l, err := grpclimit.New(grpclimit.Config{Policy: p, Store: store(t), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	auth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		tenant := metadata.ValueFromIncomingContext(ctx, "authorization") // stands for a verified token
		if len(tenant) == 0 {
			return h(ctx, req)
		}
		return h(policy.WithIdentity(ctx, "tenant", tenant[0]), req)
	}
	cc := grpctest.Dial(t, grpctest.Start(t, grpctest.Handlers{}, grpc.ChainUnaryInterceptor(auth, l.Unary)))
	for i, c := range []struct {
		tenant string
		code   codes.Code
	}{{"acme", codes.OK}, {"acme", codes.ResourceExhausted}, {"globex", codes.OK}, {"", codes.OK}, {"", codes.OK}} {
		var md []string
		if c.tenant != "" {
			md = []string{"authorization", c.tenant}
		}
		if got := say(t, cc, md...); got.code != c.code {
			t.Errorf("call %d (tenant %q): %v, want %v", i, c.tenant, got.code, c.code)
		}
	}
}

// TestConfigErrors: what New refuses.
func TestConfigErrors(t *testing.T) {
	p := newPolicy(t, policy.Rule{Name: "r", Key: policy.MustParseKey("ip"), Limit: portero.PerMinute(1)})
	conc := newPolicy(t, policy.Rule{Name: "c", Key: policy.MustParseKey("ip"), Concurrency: portero.ConcurrencyRule{Max: 1}})
	for _, c := range []struct {
		cfg  grpclimit.Config
		want string
	}{
		{grpclimit.Config{Store: store(t)}, "Policy is required"},
		{grpclimit.Config{Policy: p}, "Store is required"},
		{grpclimit.Config{Policy: p, Store: store(t), OnStoreError: portero.FailError}, "no caller to report"},
		{grpclimit.Config{Policy: p, Store: store(t), Messages: conc}, `rule "c" is a concurrency limit`},
	} {
		if _, err := grpclimit.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error with %q", c.cfg, err, c.want)
		}
	}
}

// TestQueueDeadline: a leaky-queue rule stacked with a sliding log. A call
// whose place would depart after its deadline is refused at once
// (ResourceExhausted, not DeadlineExceeded after waiting), and counts in
// no rule: the log counts only the calls that ran.
func TestQueueDeadline(t *testing.T) {
	st := store(t)
	p := newPolicy(t,
		policy.Rule{Name: "log", Key: policy.MustParseKey("global"), Algorithm: portero.SlidingLog, Limit: portero.PerMinute(100)},
		policy.Rule{Name: "queue", Key: policy.MustParseKey("global"), Algorithm: portero.LeakyQueue, Limit: portero.MustParseLimit("2/s")},
	)
	cc := serve(t, grpclimit.Config{Policy: p, Store: st}, grpctest.Handlers{})
	call := func(timeout time.Duration) codes.Code {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := grpctest.CallSay(ctx, cc, "hi")
		return status.Code(err)
	}
	if c := call(10 * time.Second); c != codes.OK {
		t.Fatalf("first call: %v, want OK after its 0.5 s hold", c)
	}
	// A place departs at least 0.5 s after it is taken: more than this
	// call's 0.2 s.
	if c := call(200 * time.Millisecond); c != codes.ResourceExhausted {
		t.Errorf("a call whose place departs after its deadline: %v, want ResourceExhausted", c)
	}
	d, err := st.Peek(context.Background(), p.Rule("log").StoreRule(), "global=*", time.Now(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 99 {
		t.Errorf("the log has %d left, want 99: the refused call counts in no rule", d.Remaining)
	}
}
