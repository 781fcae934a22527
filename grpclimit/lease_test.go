package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/grpclimit"
	"github.com/portero-rl/portero/internal/grpctest"
	"github.com/portero-rl/portero/policy"
)

// TestLeaseReleased: a concurrency rule's lease is held for the life of a
// call — a second call with the same key is refused meanwhile — and given
// back however the call ends: the client cancels, its deadline passes, the
// handler panics (a recovery interceptor outside the limiter keeps the
// server up), or it returns. The call after each is admitted again.
func TestLeaseReleased(t *testing.T) {
	p := newPolicy(t, policy.Rule{Name: "one-at-a-time", Key: policy.MustParseKey("header:X-Api-Key"), Concurrency: portero.ConcurrencyRule{Max: 1}})
	l, err := grpclimit.New(grpclimit.Config{Policy: p, Store: store(t)})
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan string, 1)
	ended := make(chan struct{}, 1)
	// Outermost: signals once the limiter (and its deferred release) has
	// returned; then recovers a handler's panic into an error.
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (_ any, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = status.Errorf(codes.Internal, "panic: %v", r)
			}
			ended <- struct{}{}
		}()
		return h(ctx, req)
	}
	say := func(ctx context.Context, in string) (string, error) {
		running <- in
		switch in {
		case "panic":
			panic("handler bug")
		case "block":
			<-ctx.Done()
			return "", status.FromContextError(ctx.Err()).Err()
		}
		return in, nil
	}
	cc := grpctest.Dial(t, grpctest.Start(t, grpctest.Handlers{Say: say}, grpc.ChainUnaryInterceptor(outer, l.Unary)))
	withKey := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-api-key", "k")
	}
	call := func(ctx context.Context, in string) error {
		_, err := grpctest.CallSay(withKey(ctx), cc, in)
		return err
	}
	for _, end := range []string{"cancel", "deadline", "panic", "return"} {
		ctx, cancel := context.WithCancel(context.Background())
		if end == "deadline" {
			ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
		}
		in := map[string]string{"cancel": "block", "deadline": "block", "panic": "panic", "return": "ok"}[end]
		done := make(chan error, 1)
		go func() { done <- call(ctx, in) }()
		<-running
		if in == "block" {
			// While the first call holds the slot, a second is refused.
			if err := call(context.Background(), "second"); status.Code(err) != codes.ResourceExhausted {
				t.Errorf("%s: a second call while the first runs: %v, want ResourceExhausted", end, err)
			}
			<-ended // the refused call's own pass through outer
		}
		if end == "cancel" {
			cancel()
		}
		err := <-done
		<-ended
		cancel()
		want := map[string]codes.Code{"cancel": codes.Canceled, "deadline": codes.DeadlineExceeded, "panic": codes.Internal, "return": codes.OK}[end]
		if status.Code(err) != want {
			t.Errorf("%s: the call ended with %v, want %v", end, err, want)
		}
		if err := call(context.Background(), "after"); err != nil {
			t.Fatalf("after a call that ended by %s: %v, want the slot back", end, err)
		}
		<-running
		<-ended
	}
}

// TestStreamLease: a stream holds its lease until it ends; a service-wide
// concurrency rule (key global) answers Unavailable with RetryInfo, as the
// HTTP doors answer 503.
func TestStreamLease(t *testing.T) {
	p := newPolicy(t, policy.Rule{Name: "in-flight", Key: policy.MustParseKey("global"), Concurrency: portero.ConcurrencyRule{Max: 1}})
	decided := make(chan bool, 4)
	l, err := grpclimit.New(grpclimit.Config{Policy: p, Store: store(t), LeaseRetryAfter: 250 * time.Millisecond,
		OnDecision: func(_ context.Context, _ string, v *engine.Verdict) { decided <- v.Allowed }})
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{}, 4)
	after := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		defer func() { ended <- struct{}{} }()
		return h(srv, ss)
	}
	cc := grpctest.Dial(t, grpctest.Start(t, grpctest.Handlers{}, grpc.ChainStreamInterceptor(after, l.Stream), grpc.ChainUnaryInterceptor(l.Unary)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := cc.NewStream(ctx, &grpctest.UploadStream, grpctest.Upload)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String("one")); err != nil {
		t.Fatal(err)
	}
	if !<-decided {
		t.Fatal("the stream was refused")
	}
	var tr metadata.MD
	_, err = grpctest.CallSay(ctx, cc, "meanwhile", grpc.Trailer(&tr))
	got := read(err, nil, tr)
	<-decided
	if got.code != codes.Unavailable || got.retryDelay != 250*time.Millisecond || got.pushback != "250" {
		t.Errorf("a call while the stream runs: %+v, want Unavailable, RetryInfo 250ms, pushback 250", got)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	out := new(wrapperspb.StringValue)
	if err := cs.RecvMsg(out); err != nil || out.GetValue() != "1" {
		t.Fatalf("the stream's answer: %q, %v", out.GetValue(), err)
	}
	if err := cs.RecvMsg(out); !errors.Is(err, io.EOF) {
		t.Fatalf("after the answer: %v, want EOF", err)
	}
	<-ended
	if _, err := grpctest.CallSay(ctx, cc, "after"); err != nil || !<-decided {
		t.Errorf("a call after the stream ended: %v, want the slot back", err)
	}
}
