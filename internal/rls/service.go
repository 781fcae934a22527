// Package rls is Portero's Envoy rate limit service: the gRPC service
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, a drop-in
// for envoyproxy/ratelimit that reads the same YAML (package envoyconf) and
// decides through any portero.Store. It is a door: it translates protobuf
// into a descriptor.Request, package descriptor compiles that into hits,
// package engine decides, and it translates the verdict back (statuses from
// descriptor.Plan.Status, headers from engine/header). It is the only
// package that sees protobuf types.
//
// # Semantics
//
// Every descriptor is looked up as envoyproxy/ratelimit does. The request's
// hits_addend (0 means 1) is each descriptor's cost unless the descriptor
// sets its own hits_addend; a descriptor hits_addend of 0 checks without
// counting (the descriptor is OVER_LIMIT when not even one more hit would
// pass). A descriptor's limit override replaces the configured limit.
//
// All descriptors of one request are decided all-or-nothing: when any
// enforced descriptor is over its limit, the request is OVER_LIMIT and none
// of its descriptors is counted. envoyproxy/ratelimit instead increments
// every descriptor's counter, even for requests it refuses, so a client
// hammering one limit also drains the others; Portero charges only for
// requests that pass. shadow_mode rules are counted when the request passes
// and never refuse it. A cost above what a limit can ever admit at once
// (and a requests_per_unit of 0) is OVER_LIMIT without Retry-After: it can
// never pass.
//
// The response carries overall_code, one status per descriptor
// (current_limit, limit_remaining, duration_until_reset) and, in
// response_headers_to_add, RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11) plus Retry-After when over the
// limit, which Envoy copies onto its 429 (and the RateLimit fields onto
// allowed responses). When the store fails, the engine's failure policy
// answers (or, under portero.FailError, the call is UNAVAILABLE); a
// descriptor the policy decided carries no current_limit and no RateLimit
// item, since its figures are no shared count.
package rls

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
)

// ServiceName is the gRPC name of the rate limit service, also used for its
// health status.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// HealthName is the name envoyproxy/ratelimit gives its gRPC health status,
// which probes written for it ask about; both transports answer it.
const HealthName = "ratelimit"

// ServiceOptions tune the gRPC door. The zero value is the default.
type ServiceOptions struct {
	// CallTimeout bounds one call when the caller's own deadline (Envoy's
	// filter timeout, 20 ms by default) is later or absent. 0 means 1s.
	CallTimeout time.Duration
	// NoHeaders leaves response_headers_to_add empty.
	NoHeaders bool
	// Compat, when set, answers as envoyproxy/ratelimit does (see Compat);
	// NoHeaders then does not apply (Compat.Headers does).
	Compat *Compat
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives store failures; nil means slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told of every call: its plan and verdict, or
	// its error (portero rls's metrics).
	Observer descriptor.Observer
	// Tracer, when set, records a span of every call (package rlstrace).
	Tracer Tracer
}

// Tracer starts the span of one call of req, returning the context the
// call goes on in and the function that ends the span.
type Tracer interface {
	Start(ctx context.Context, req *descriptor.Request) (context.Context, func())
}

// Service is ShouldRateLimit on protobuf bytes: it decodes each request
// into a descriptor.Request (wire.go), compiles it (c), has the engine (e)
// decide, and encodes the verdict. What happens when the store fails is
// the engine's failure policy: under portero.FailError the call is
// answered UNAVAILABLE, so that Envoy's failure_mode_deny decides; under
// FailAllow, FailDeny or FailLocal the engine answers.
type Service struct {
	compiler *descriptor.Compiler
	engine   *engine.Engine
	opts     ServiceOptions
}

// NewService returns the gRPC door over compiler c and engine e (which the
// HTTP check API may share: the same counters, the same answers).
func NewService(c *descriptor.Compiler, e *engine.Engine, o ServiceOptions) *Service {
	if o.CallTimeout <= 0 {
		o.CallTimeout = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Compat != nil {
		o.Compat = o.Compat.withDefaults()
	}
	return &Service{compiler: c, engine: e, opts: o}
}

// ShouldRateLimit answers the serialized RateLimitRequest msg, appending
// the serialized RateLimitResponse to out: both transports and /json call
// it. Bad input is INVALID_ARGUMENT, an unknown domain NOT_FOUND (unless
// the compiler allows unknown domains), a store failure UNAVAILABLE under
// portero.FailError, and an expired deadline DEADLINE_EXCEEDED; none of
// them is ever answered OK.
func (s *Service) ShouldRateLimit(ctx context.Context, msg, out []byte) ([]byte, error) {
	rb := requestPool.Get().(*requestBlock)
	defer rb.release()
	req, err := rb.decode(msg)
	if err != nil {
		return nil, err
	}
	a, err := s.decide(ctx, req)
	if err != nil {
		return nil, err
	}
	defer a.release()
	return appendResponse(out, a), nil
}

// Requests with at most inlineDescriptors descriptors of at most
// inlineEntries entries in all are converted without allocating beyond the
// requestBlock.
const (
	inlineDescriptors = 4
	inlineEntries     = 8
)

// requestBlock holds a converted request and, for small ones, its
// descriptors, entries and hits. ShouldRateLimit takes blocks from
// requestPool, so that converting a request allocates nothing: nothing the
// engine returns points into the request.
type requestBlock struct {
	req     descriptor.Request
	descs   [inlineDescriptors]descriptor.Descriptor
	entries [inlineEntries]descriptor.Entry
	hits    [inlineDescriptors]uint64
}

var requestPool = sync.Pool{New: func() any { return new(requestBlock) }}

// release clears rb, so that the pool keeps no strings of the request
// alive, and puts it back.
func (rb *requestBlock) release() {
	*rb = requestBlock{}
	requestPool.Put(rb)
}
