package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// ShedConfig configures a Shedder. Gate is required; every other field's
// zero value is the documented default.
type ShedConfig struct {
	// Gate decides; share one Gate between every door that leads to the
	// same capacity (an HTTP and a gRPC listener of one service). Required.
	Gate *overload.Gate
	// Priority gives each call its class from its full method name and
	// incoming metadata (see PriorityByRule); nil means overload.Default for
	// all. It runs before anything else and must be cheap.
	Priority func(ctx context.Context, method string) overload.Priority
	// Tenant names each call's tenant for fair shedding (a claim, read
	// before authentication: good enough to share capacity fairly, not to
	// trust); nil means one tenant for all.
	Tenant func(ctx context.Context, method string) string
	// Timeout is how long clients wait for an answer, when their deadline
	// does not say: a call's deadline is its arrival plus Timeout, or its
	// context's deadline if earlier. Zero means the context's only.
	Timeout time.Duration
	// OnRefuse, when not nil, is called for every refusal; it must be fast
	// and safe for concurrent use.
	OnRefuse func(ctx context.Context, method string, ref *overload.Refusal)
}

// Shedder sheds load for the service's own sake: each call asks the Gate
// for a slot before the handler (and any interceptor after this one, such as
// the Limiter's) runs, may wait briefly in its queue, and is answered
// codes.Unavailable with RetryInfo and the pushback trailer when refused —
// never ResourceExhausted: the client did nothing wrong. The slot is given
// back when the handler returns, however it returns (a panic included), for
// a stream when the stream ends. Put it first in the chain. It is immutable
// and safe for concurrent use.
type Shedder struct {
	cfg ShedConfig
}

// NewShedder validates cfg and returns a Shedder.
func NewShedder(cfg ShedConfig) (*Shedder, error) {
	if cfg.Gate == nil {
		return nil, errors.New("grpclimit: ShedConfig.Gate is required")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("grpclimit: ShedConfig.Timeout is %v: want zero or more", cfg.Timeout)
	}
	return &Shedder{cfg: cfg}, nil
}

// acquire asks the Gate for a slot for a call to method.
func (s *Shedder) acquire(ctx context.Context, method string) (*overload.Ticket, error) {
	cfg := &s.cfg
	req := overload.Request{}
	if cfg.Priority != nil {
		req.Priority = cfg.Priority(ctx, method)
	}
	if cfg.Tenant != nil {
		req.Tenant = cfg.Tenant(ctx, method)
	}
	if cfg.Timeout > 0 {
		req.Deadline = time.Now().Add(cfg.Timeout)
	}
	t, err := cfg.Gate.Acquire(ctx, req)
	if err == nil {
		return t, nil
	}
	var ref *overload.Refusal
	if !errors.As(err, &ref) {
		return nil, status.FromContextError(err).Err() // the client went away while it waited
	}
	if cfg.OnRefuse != nil {
		cfg.OnRefuse(ctx, method, ref)
	}
	retry := max(ref.RetryAfter, time.Millisecond)
	_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackKey, fmt.Sprint(retry.Milliseconds())))
	return nil, unavailable(retry, ref.Detail()).Err()
}

// Unary is the unary server interceptor.
func (s *Shedder) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	t, err := s.acquire(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	defer s.cfg.Gate.Release(t)
	return handler(ctx, req)
}

// Stream is the stream server interceptor.
func (s *Shedder) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	t, err := s.acquire(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	defer s.cfg.Gate.Release(t)
	return handler(srv, ss)
}

// PriorityByRule returns a ShedConfig.Priority that gives each call the
// priority of the first rule whose Match selects it and fallback when none
// does, matching as the HTTP door matches (policy.Priorities): the full
// method name as the path ("/pkg.Service/*"), POST as the method,
// :authority as the host, and the metadata its matches name as headers
// (Match.Headers{"X-Priority": "low"} reads x-priority). A Match that does
// not compile is an error naming the rule.
func PriorityByRule(rules []policy.PriorityRule, fallback overload.Priority) (func(ctx context.Context, method string) overload.Priority, error) {
	ps, err := policy.NewPriorities(rules, fallback)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	hdrs := ps.Headers()
	keys := make([]string, len(hdrs))
	for i, h := range hdrs {
		keys[i] = lower(h)
	}
	return func(ctx context.Context, method string) overload.Priority {
		req := policy.Request{Method: "POST", Path: method}
		if a := metadata.ValueFromIncomingContext(ctx, ":authority"); len(a) > 0 {
			req.Host = a[0]
		}
		for i, k := range keys {
			if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
				if req.Header == nil {
					req.Header = make(map[string][]string, len(keys))
				}
				req.Header[hdrs[i]] = v
			}
		}
		return ps.Of(&req)
	}, nil
}
