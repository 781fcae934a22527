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
	"math"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

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

// Service implements RateLimitServiceServer: it translates each request
// into a descriptor.Request, compiles it (c), has the engine (e) decide,
// and translates the verdict back. What happens when the store fails is
// the engine's failure policy: under portero.FailError the call is
// answered UNAVAILABLE, so that Envoy's failure_mode_deny decides; under
// FailAllow, FailDeny or FailLocal the engine answers.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	compiler *descriptor.Compiler
	engine   *engine.Engine
	opts     ServiceOptions
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

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

// ShouldRateLimit implements RateLimitServiceServer. Bad input is
// INVALID_ARGUMENT, an unknown domain NOT_FOUND (unless the compiler allows
// unknown domains), a store failure UNAVAILABLE under portero.FailError,
// and an expired deadline DEADLINE_EXCEEDED; none of them is ever answered
// OK.
func (s *Service) ShouldRateLimit(ctx context.Context, in *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	rb := requestPool.Get().(*requestBlock)
	defer rb.release()
	req, err := rb.fromProto(in)
	if err != nil {
		return nil, err
	}
	a, err := s.decide(ctx, req)
	if err != nil {
		return nil, err
	}
	defer a.release()
	return toProto(a), nil
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

// fromProto converts the generated request into rb's, the compiler's form.
func (rb *requestBlock) fromProto(in *pb.RateLimitRequest) (*descriptor.Request, error) {
	req := &rb.req
	req.Domain, req.Hits = in.GetDomain(), in.GetHitsAddend()
	pds := in.GetDescriptors()
	n := 0
	for _, d := range pds {
		n += len(d.GetEntries())
	}
	if len(pds) <= inlineDescriptors {
		req.Descriptors = rb.descs[:len(pds)]
	} else {
		req.Descriptors = make([]descriptor.Descriptor, len(pds))
	}
	entries := rb.entries[:0:inlineEntries]
	if n > inlineEntries {
		entries = make([]descriptor.Entry, 0, n)
	}
	for i, d := range pds {
		if d == nil {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: empty", i)
		}
		out := &req.Descriptors[i]
		out.Negative = d.GetIsNegativeHits()
		start := len(entries)
		for _, e := range d.GetEntries() {
			entries = append(entries, descriptor.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		out.Entries = entries[start:len(entries):len(entries)]
		if l := d.GetLimit(); l != nil {
			out.Override = &descriptor.Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: descriptor.Unit(l.GetUnit())}
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			if i < inlineDescriptors {
				rb.hits[i] = v
				out.Hits = &rb.hits[i]
			} else {
				out.Hits = &v
			}
		}
	}
	return req, nil
}

// responseBlock holds a protobuf response with up to inlineStatuses
// statuses and its headers: one allocation for the whole answer.
type responseBlock struct {
	out      pb.RateLimitResponse
	statuses [inlineStatuses]*pb.RateLimitResponse_DescriptorStatus
	sts      [inlineStatuses]pb.RateLimitResponse_DescriptorStatus
	limits   [inlineStatuses]pb.RateLimitResponse_RateLimit
	durs     [inlineStatuses]durationpb.Duration
	headers  [maxHeaders]*corev3.HeaderValue
	hvs      [maxHeaders]corev3.HeaderValue
}

func toProto(a *answer) *pb.RateLimitResponse {
	n := len(a.statuses)
	blk := new(responseBlock)
	out := &blk.out
	out.OverallCode = pb.RateLimitResponse_Code(a.code)
	var (
		sts    []pb.RateLimitResponse_DescriptorStatus
		limits []pb.RateLimitResponse_RateLimit
		durs   []durationpb.Duration
	)
	if n <= inlineStatuses {
		out.Statuses, sts, limits, durs = blk.statuses[:n], blk.sts[:n], blk.limits[:n], blk.durs[:n]
	} else {
		out.Statuses = make([]*pb.RateLimitResponse_DescriptorStatus, n)
		sts = make([]pb.RateLimitResponse_DescriptorStatus, n)
		limits = make([]pb.RateLimitResponse_RateLimit, n)
		durs = make([]durationpb.Duration, n)
	}
	for i := range a.statuses {
		st := &a.statuses[i]
		ps := &sts[i]
		ps.Code = pb.RateLimitResponse_Code(st.Code)
		ps.LimitRemaining = uint32(min(max(st.Remaining, 0), math.MaxUint32))
		if announced(st) {
			l := st.Limit
			cl := &limits[i]
			cl.Name, cl.RequestsPerUnit, cl.Unit = a.limitName(l), l.RequestsPerUnit, pb.RateLimitResponse_RateLimit_Unit(l.Unit)
			ps.CurrentLimit = cl
			// As durationpb.New: whole seconds and the nanoseconds left.
			d := &durs[i]
			d.Seconds, d.Nanos = int64(st.ResetAfter/time.Second), int32(st.ResetAfter%time.Second)
			ps.DurationUntilReset = d
		}
		out.Statuses[i] = ps
	}
	if len(a.fields) > 0 {
		hs, hvs := blk.headers[:0], blk.hvs[:0]
		if len(a.fields) > maxHeaders {
			hs, hvs = make([]*corev3.HeaderValue, 0, len(a.fields)), make([]corev3.HeaderValue, 0, len(a.fields))
		}
		for _, f := range a.fields {
			hvs = append(hvs, corev3.HeaderValue{Key: f.Name, Value: f.Value(a.buf)})
			hs = append(hs, &hvs[len(hvs)-1])
		}
		out.ResponseHeadersToAdd = hs
	}
	out.DynamicMetadata = a.metadata
	return out
}
