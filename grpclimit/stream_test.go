package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/grpclimit"
	"github.com/portero-rl/portero/internal/grpctest"
	"github.com/portero-rl/portero/policy"
)

// TestMessagesWait: a stream limited per message (GCRA, one message per
// 100 ms for each stream) is not torn down when its client sends faster:
// RecvMsg waits for each message's turn, so all of them arrive, no sooner
// than the limit allows (a lower bound of the wall clock, which a loaded
// machine only lengthens), and two streams at once each get their own
// limit.
func TestMessagesWait(t *testing.T) {
	calls := newPolicy(t, policy.Rule{Name: "calls", Key: policy.MustParseKey("ip"), Limit: portero.PerSecond(1000)})
	msgs := newPolicy(t, policy.Rule{Name: "per-stream", Key: policy.MustParseKey("identity:stream"), Algorithm: portero.GCRA,
		Limit: portero.Limit{Count: 1, Window: 100 * time.Millisecond}})
	var mu sync.Mutex
	var spans []time.Duration
	upload := func(ss grpc.ServerStream) error {
		start := time.Now()
		n := 0
		for {
			err := ss.RecvMsg(new(wrapperspb.StringValue))
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if n++; n == 1 {
				start = time.Now() // the first message passes at once
			}
		}
		mu.Lock()
		spans = append(spans, time.Since(start))
		mu.Unlock()
		return ss.SendMsg(wrapperspb.String(strconv.Itoa(n)))
	}
	cc := serve(t, grpclimit.Config{Policy: calls, Store: store(t), Messages: msgs}, grpctest.Handlers{Upload: upload})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got, err := grpctest.CallUpload(ctx, cc, []string{"a", "b", "c", "d", "e"})
			if err != nil || got != "5" {
				t.Errorf("upload of 5 messages: %q, %v; want all 5 received", got, err)
			}
		})
	}
	wg.Wait()
	for _, s := range spans {
		if s < 400*time.Millisecond {
			t.Errorf("5 messages at one per 100 ms were received within %v: want at least 400 ms", s)
		}
	}
}

// TestMessagesDeadline: a message whose turn would come after the call's
// deadline is refused at once, with the rule's RetryInfo, rather than
// waited for in vain.
func TestMessagesDeadline(t *testing.T) {
	calls := newPolicy(t, policy.Rule{Name: "calls", Key: policy.MustParseKey("ip"), Limit: portero.PerSecond(1000)})
	msgs := newPolicy(t, policy.Rule{Name: "per-key", Key: policy.MustParseKey("header:X-Api-Key"), Algorithm: portero.GCRA, Limit: portero.Limit{Count: 1, Window: time.Hour}})
	cc := serve(t, grpclimit.Config{Policy: calls, Store: store(t), Messages: msgs}, grpctest.Handlers{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", "k")
	_, err := grpctest.CallUpload(ctx, cc, []string{"a", "b"})
	got := read(err, nil, nil)
	if got.code != codes.ResourceExhausted || got.retryDelay < 59*time.Minute || !strings.Contains(got.message, `rule "per-key"`) {
		t.Errorf("a second message an hour away, deadline in 5 s: %+v, want ResourceExhausted with RetryInfo of about an hour", got)
	}
}

// TestHandlerReportsCost: a rule whose cost the handler reports (cost
// response-header:X-Tokens, the handler's trailer x-tokens) reserves 1 when
// the call is decided and is settled with what the handler reported; a
// rule of Responses 401 counts only the calls that end Unauthenticated.
func TestHandlerReportsCost(t *testing.T) {
	cost, err := policy.ParseCost("response-header:X-Tokens")
	if err != nil {
		t.Fatal(err)
	}
	fails, err := policy.ParseStatuses([]string{"401"})
	if err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t,
		policy.Rule{Name: "tokens", Match: policy.Match{Path: grpctest.Say}, Key: policy.MustParseKey("global"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(100), Cost: cost},
		policy.Rule{Name: "bad-logins", Match: policy.Match{Path: grpctest.Upload}, Key: policy.MustParseKey("global"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(2), Responses: fails},
	)
	say := func(ctx context.Context, in string) (string, error) {
		if err := grpc.SetTrailer(ctx, metadata.Pairs("x-tokens", in)); err != nil {
			return "", err
		}
		return in, nil
	}
	upload := func(ss grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if len(md.Get("password")) > 0 && md.Get("password")[0] == "right" {
			return grpctest.CountUpload(ss)
		}
		return status.Error(codes.Unauthenticated, "wrong password")
	}
	cc := serve(t, grpclimit.Config{Policy: p, Store: store(t), Now: func() time.Time { return t0 }}, grpctest.Handlers{Say: say, Upload: upload})
	ctx := context.Background()
	for i, step := range []struct{ in, want string }{
		{"30", `"tokens";r=99;t=50`}, // the reservation of 1, before the handler reported 30
		{"50", `"tokens";r=69;t=50`}, // 100 - 30 - the new reservation
		{"1", `"tokens";r=19;t=50`},
	} {
		var hdr metadata.MD
		if _, err := grpctest.CallSay(ctx, cc, step.in, grpc.Header(&hdr)); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(hdr.Get("ratelimit"), ", "); got != step.want {
			t.Errorf("call %d: ratelimit %q, want %q", i, got, step.want)
		}
	}
	login := func(password string) codes.Code {
		_, err := grpctest.CallUpload(metadata.AppendToOutgoingContext(ctx, "password", password), cc, []string{"x"})
		return status.Code(err)
	}
	for i, step := range []struct {
		password string
		want     codes.Code
	}{
		{"right", codes.OK}, {"right", codes.OK}, {"right", codes.OK}, // good logins are not counted
		{"wrong", codes.Unauthenticated}, {"wrong", codes.Unauthenticated},
		{"right", codes.ResourceExhausted}, // two failures spent the rule
	} {
		if got := login(step.password); got != step.want {
			t.Errorf("login %d (%s): %v, want %v", i, step.password, got, step.want)
		}
	}
}
