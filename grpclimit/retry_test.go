package grpclimit_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/grpclimit"
	"github.com/portero-rl/portero/internal/grpctest"
	"github.com/portero-rl/portero/policy"
)

// retryServiceConfig is grpc-go's own retry policy for the test service:
// up to 3 attempts of RESOURCE_EXHAUSTED, with a backoff of 10 ms that a
// server's pushback replaces.
const retryServiceConfig = `{"methodConfig":[{"name":[{"service":"portero.test.Echo"}],
  "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.01s","backoffMultiplier":1,
  "retryableStatusCodes":["RESOURCE_EXHAUSTED"]}}]}`

// decisions records the instant and the answer of every decision.
type decisions struct {
	mu  sync.Mutex
	at  []time.Time
	ok  []bool
	ask []time.Duration // RetryDelay of each refusal, 0 for an admission
}

func (d *decisions) record(_ context.Context, _ string, v *engine.Verdict) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at, d.ok, d.ask = append(d.at, time.Now()), append(d.ok, v.Allowed), append(d.ask, grpclimit.RetryDelay(v))
}

func (d *decisions) snapshot() ([]time.Time, []bool, []time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Time(nil), d.at...), append([]bool(nil), d.ok...), append([]time.Duration(nil), d.ask...)
}

// oneASecond admits one call per second for everyone (GCRA): a second call
// at once is refused with a retry delay of exactly 1 s.
func oneASecond(t *testing.T, rec *decisions) *grpclimit.Limiter {
	p := newPolicy(t, policy.Rule{Name: "one-a-second", Key: policy.MustParseKey("global"), Algorithm: portero.GCRA, Limit: portero.PerSecond(1)})
	l, err := grpclimit.New(grpclimit.Config{Policy: p, Store: store(t), OnDecision: rec.record})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestGRPCRetryPolicyWaitsPushback: grpc-go's built-in retry policy, told
// by the refusal's grpc-retry-pushback-ms to wait 1 s, waits exactly that
// (virtual time: the whole server and client run inside a synctest bubble
// over bufconn) instead of its own 10 ms backoff, and the retry passes. It
// also proves the refusal is Trailers-Only, without which grpc-go does not
// retry at all.
func TestGRPCRetryPolicyWaitsPushback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &decisions{}
		l := oneASecond(t, rec)
		lis := bufconn.Listen(1 << 20)
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(l.Unary))
		srv.RegisterService(grpctest.Desc(grpctest.Handlers{}), nil)
		go func() { _ = srv.Serve(lis) }()
		defer srv.Stop()
		cc, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithDefaultServiceConfig(retryServiceConfig))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		start := time.Now()
		for i := range 2 {
			if _, err := grpctest.CallSay(context.Background(), cc, "hi"); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		at, ok, ask := rec.snapshot()
		if len(at) != 3 || !ok[0] || ok[1] || !ok[2] || ask[1] != time.Second {
			t.Fatalf("decisions: allowed %v, retry delays %v; want allowed, refused with 1s, allowed", ok, ask)
		}
		if got := at[2].Sub(at[1]); got != time.Second {
			t.Errorf("grpc-go retried %v after the refusal, want exactly the 1 s pushback", got)
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("the two calls took %v, want 1 s", got)
		}
	})
}

// TestGRPCRetryPolicyLoopback: the same on a real server and client on
// 127.0.0.1 and the wall clock, asserting only a lower bound (which a
// loaded machine cannot break): the retry reaches the server no sooner than
// the pushback after the refusal was decided.
func TestGRPCRetryPolicyLoopback(t *testing.T) {
	rec := &decisions{}
	l := oneASecond(t, rec)
	cc := grpctest.Dial(t, grpctest.Start(t, grpctest.Handlers{}, grpc.ChainUnaryInterceptor(l.Unary)), grpc.WithDefaultServiceConfig(retryServiceConfig))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Two calls back to back; on a machine so slow that the second comes a
	// second later (and passes at once), try again.
	for try := 0; try < 5; try++ {
		for i := range 2 {
			if _, err := grpctest.CallSay(ctx, cc, "hi"); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		at, ok, ask := rec.snapshot()
		for i := 1; i+1 < len(at); i++ {
			if ok[i] || !ok[i+1] {
				continue
			}
			if got := at[i+1].Sub(at[i]); got < ask[i] {
				t.Errorf("grpc-go retried %v after a refusal that asked for %v", got, ask[i])
			}
			return
		}
	}
	t.Fatal("no call was refused and then retried")
}
