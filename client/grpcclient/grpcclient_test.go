package grpcclient_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/client"
	"github.com/portero-rl/portero/client/grpcclient"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/grpclimit"
	"github.com/portero-rl/portero/internal/grpctest"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// limited returns a Limiter admitting one call per second for everyone, and
// the instants of its admissions and refusals.
func limited(t *testing.T) (*grpclimit.Limiter, func() (at []time.Time, ok []bool)) {
	l, d := limitedDelays(t)
	return l, func() ([]time.Time, []bool) { at, ok, _ := d(); return at, ok }
}

// limitedDelays is limited, also returning the retry delay of each refusal.
func limitedDelays(t *testing.T) (*grpclimit.Limiter, func() (at []time.Time, ok []bool, ask []time.Duration)) {
	t.Helper()
	st, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	p, err := policy.New([]policy.Rule{{Name: "one-a-second", Key: policy.MustParseKey("global"), Algorithm: portero.GCRA, Limit: portero.PerSecond(1)}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var at []time.Time
	var ok []bool
	var ask []time.Duration
	l, err := grpclimit.New(grpclimit.Config{Policy: p, Store: st, OnDecision: func(_ context.Context, _ string, v *engine.Verdict) {
		mu.Lock()
		at, ok, ask = append(at, time.Now()), append(ok, v.Allowed), append(ask, grpclimit.RetryDelay(v))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	return l, func() ([]time.Time, []bool, []time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), at...), append([]bool(nil), ok...), append([]time.Duration(nil), ask...)
	}
}

// TestWaitsServersDelay: against a Portero-limited grpc-go server (bufconn,
// the whole of it in a synctest bubble, grpc-go's own retries off) that
// admits one call a second. A client that has seen the RateLimit fields
// paces its next call to when the quota is back, and is not refused; a
// fresh client, refused with a 1 s delay, retries 1 s later plus its
// jitter, not sooner, and passes — a non-idempotent method too, since a
// refusal with a delay says nothing was done.
func TestWaitsServersDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, decisions := limited(t)
		lis := bufconn.Listen(1 << 20)
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary))
		srv.RegisterService(grpctest.Desc(grpctest.Handlers{}), nil)
		go func() { _ = srv.Serve(lis) }()
		defer srv.Stop()
		dial := func() *grpc.ClientConn {
			c, err := grpcclient.New(grpcclient.Config{Jitter: 200 * time.Millisecond, Rand: rand.NewPCG(1, 2)})
			if err != nil {
				t.Fatal(err)
			}
			cc, err := grpc.NewClient("passthrough:///bufconn", append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry(),
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			return cc
		}
		paced, fresh := dial(), dial()
		for i, cc := range []*grpc.ClientConn{paced, paced, fresh} {
			if _, err := grpctest.CallSay(context.Background(), cc, "hi"); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		at, ok := decisions()
		if len(at) != 4 || !ok[0] || !ok[1] || ok[2] || !ok[3] {
			t.Fatalf("decisions %v, want allowed, allowed (paced), refused, allowed", ok)
		}
		if got := at[1].Sub(at[0]); got != time.Second {
			t.Errorf("the paced call came %v after the first, want 1 s (r=0;t=1)", got)
		}
		if got := at[3].Sub(at[2]); got < time.Second || got >= 1200*time.Millisecond {
			t.Errorf("the retry came %v after the refusal, want the 1 s delay plus under 200 ms of jitter", got)
		}
	})
}

// TestWaitsServersDelayLoopback: the same against a real server on
// 127.0.0.1 and the wall clock, asserting the lower bound only: a refused
// call's retry reaches the server no sooner than the delay it was told.
func TestWaitsServersDelayLoopback(t *testing.T) {
	l, decisions := limitedDelays(t)
	addr := grpctest.Start(t, grpctest.Handlers{}, grpc.ChainUnaryInterceptor(l.Unary))
	for try := 0; try < 5; try++ {
		for range 2 { // fresh clients: no pacing from an earlier answer
			c, err := grpcclient.New(grpcclient.Config{})
			if err != nil {
				t.Fatal(err)
			}
			cc := grpctest.Dial(t, addr, append(c.DialOptions(), grpc.WithDisableRetry())...)
			if _, err := grpctest.CallSay(context.Background(), cc, "hi"); err != nil {
				t.Fatal(err)
			}
		}
		at, ok, ask := decisions()
		for i := 1; i+1 < len(at); i++ {
			if !ok[i] && ok[i+1] {
				if got := at[i+1].Sub(at[i]); got < ask[i] {
					t.Errorf("retried %v after a refusal that asked for %v", got, ask[i])
				}
				return
			}
		}
	}
	t.Fatal("no call was refused and then retried")
}

// fakeInvoker answers each attempt from a script and records the instants.
type fakeInvoker struct {
	answers []error
	at      []time.Time
}

func (f *fakeInvoker) invoke(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	f.at = append(f.at, time.Now())
	err := f.answers[min(len(f.at)-1, len(f.answers)-1)]
	for _, o := range opts {
		if tr, ok := o.(grpc.TrailerCallOption); ok && err != nil {
			if st, ok := status.FromError(err); ok {
				if pb, ok := pushbacks[st.Message()]; ok {
					*tr.TrailerAddr = metadata.Pairs(grpcclient.PushbackKey, pb)
				}
			}
		}
	}
	return err
}

// pushbacks: a status whose message is a key is answered with that pushback.
var pushbacks = map[string]string{"pushback 300": "300", "pushback -1": "-1"}

func withRetryInfo(code codes.Code, d time.Duration) error {
	st, _ := status.New(code, "refused").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	return st.Err()
}

func quotaNever() error {
	st, _ := status.New(codes.ResourceExhausted, "can never pass").WithDetails(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "r"}}})
	return st.Err()
}

func ccFor(t *testing.T) *grpc.ClientConn {
	cc, err := grpc.NewClient("passthrough:///fake", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestWhatIsRetried: the waits and retries of scripted answers (virtual
// time): RetryInfo and the pushback are waited exactly (no jitter here),
// backoff without a delay only for an idempotent method, never a refusal
// that can never pass, never past MaxAttempts, never a status that is no
// refusal.
func TestWhatIsRetried(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "down")
	for _, tc := range []struct {
		name       string
		method     string
		answers    []error
		wantWaits  []time.Duration
		wantErr    codes.Code
		maxAttempt int
	}{
		{"RetryInfo", "/s/Write", []error{withRetryInfo(codes.ResourceExhausted, 700*time.Millisecond), nil}, []time.Duration{700 * time.Millisecond}, codes.OK, 0},
		{"pushback", "/s/Write", []error{status.Error(codes.ResourceExhausted, "pushback 300"), nil}, []time.Duration{300 * time.Millisecond}, codes.OK, 0},
		{"unavailable with a delay", "/s/Write", []error{withRetryInfo(codes.Unavailable, time.Second), nil}, []time.Duration{time.Second}, codes.OK, 0},
		{"no delay, not idempotent", "/s/Write", []error{unavailable, nil}, nil, codes.Unavailable, 0},
		{"no delay, idempotent: backoff", "/s/Get", []error{unavailable, unavailable, nil}, []time.Duration{-1, -1}, codes.OK, 0},
		{"never passes (QuotaFailure, no delay)", "/s/Get", []error{quotaNever(), nil}, nil, codes.ResourceExhausted, 0},
		{"never passes (pushback -1)", "/s/Get", []error{status.Error(codes.ResourceExhausted, "pushback -1"), nil}, nil, codes.ResourceExhausted, 0},
		{"not a refusal", "/s/Get", []error{status.Error(codes.InvalidArgument, "bad"), nil}, nil, codes.InvalidArgument, 0},
		{"attempts", "/s/Get", []error{withRetryInfo(codes.ResourceExhausted, time.Second)}, []time.Duration{time.Second, time.Second}, codes.ResourceExhausted, 3},
		{"delay above MaxRetryDelay", "/s/Get", []error{withRetryInfo(codes.ResourceExhausted, time.Hour), nil}, nil, codes.ResourceExhausted, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, err := grpcclient.New(grpcclient.Config{Jitter: -1, MaxAttempts: tc.maxAttempt, Rand: rand.NewPCG(1, 2),
					Idempotent: func(m string) bool { return m == "/s/Get" }})
				if err != nil {
					t.Fatal(err)
				}
				f := &fakeInvoker{answers: tc.answers}
				err = c.Unary(context.Background(), tc.method, nil, nil, ccFor(t), f.invoke)
				if status.Code(err) != tc.wantErr {
					t.Errorf("error %v, want %v", err, tc.wantErr)
				}
				if len(f.at) != len(tc.wantWaits)+1 {
					t.Fatalf("%d attempts, want %d", len(f.at), len(tc.wantWaits)+1)
				}
				for i, w := range tc.wantWaits {
					got := f.at[i+1].Sub(f.at[i])
					if w < 0 { // backoff: full jitter below min(Cap, Base·2^(n−1))
						if ceil := client.Backoff(i+1, client.DefaultBase, client.DefaultCap); got >= ceil {
							t.Errorf("backoff %d waited %v, want under %v", i+1, got, ceil)
						}
						continue
					}
					if got != w {
						t.Errorf("wait %d: %v, want %v", i+1, got, w)
					}
				}
			})
		})
	}
}

// TestBreakerCountsCalls: one call retried to its attempt limit against
// an unavailable target is one failed call; the breaker opens at the
// configured number of calls, and then answers at once, with
// client.ErrCircuitOpen, without calling the target.
func TestBreakerCountsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := grpcclient.New(grpcclient.Config{Breaker: grpcclient.Breaker{Failures: 2}, Idempotent: func(string) bool { return true }, Rand: rand.NewPCG(1, 2)})
		if err != nil {
			t.Fatal(err)
		}
		cc := ccFor(t)
		f := &fakeInvoker{answers: []error{status.Error(codes.Unavailable, "down")}}
		_ = c.Unary(context.Background(), "/s/Get", nil, nil, cc, f.invoke)
		if got := c.BreakerState(cc.Target()); got != client.BreakerClosed || len(f.at) != grpcclient.DefaultMaxAttempts {
			t.Fatalf("after one call of %d attempts the breaker is %v, want closed (one failed call)", len(f.at), got)
		}
		_ = c.Unary(context.Background(), "/s/Get", nil, nil, cc, f.invoke)
		if got := c.BreakerState(cc.Target()); got != client.BreakerOpen {
			t.Fatalf("after two failed calls the breaker is %v, want open", got)
		}
		n := len(f.at)
		err = c.Unary(context.Background(), "/s/Get", nil, nil, cc, f.invoke)
		if !errors.Is(err, client.ErrCircuitOpen) || status.Code(err) != codes.Unavailable || len(f.at) != n {
			t.Errorf("a call with the breaker open: %v after %d more attempts, want Unavailable wrapping ErrCircuitOpen, none sent", err, len(f.at)-n)
		}
	})
}

// TestRetryBudgetShared: calls share the budget; once refusals have spent
// half of it, no call retries any more, only first attempts go.
func TestRetryBudgetShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, _ := client.NewRetryBudget(4, 0.1)
		c, err := grpcclient.New(grpcclient.Config{Budget: budget, Jitter: -1, Breaker: grpcclient.Breaker{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		cc := ccFor(t)
		f := &fakeInvoker{answers: []error{withRetryInfo(codes.ResourceExhausted, time.Second)}}
		var attempts []int
		for range 3 {
			before := len(f.at)
			_ = c.Unary(context.Background(), "/s/Write", nil, nil, cc, f.invoke)
			attempts = append(attempts, len(f.at)-before)
		}
		// 4 tokens: the first failure leaves 3 (a retry), the second 2 (half:
		// none); every later call's one attempt takes another.
		if attempts[0] != 2 || attempts[1] != 1 || attempts[2] != 1 {
			t.Errorf("attempts per call %v, want [2 1 1]", attempts)
		}
	})
}
