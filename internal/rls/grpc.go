// Package rls is Portero's Envoy rate limit service: the gRPC service
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, a drop-in
// for envoyproxy/ratelimit that reads the same YAML (package envoyconf) and
// decides through any portero.Store. It is the only package that sees
// protobuf types; the decision itself (Engine) is protobuf-free and shared
// with the HTTP check API.
//
// # Semantics
//
// Every descriptor is looked up as envoyproxy/ratelimit does. The request's
// hits_addend (0 means 1) is each descriptor's cost unless the descriptor
// sets its own hits_addend; a descriptor hits_addend of 0 checks without
// counting (the descriptor is OVER_LIMIT when not even one more hit would
// pass). A descriptor's limit override replaces the configured limit.
//
// All descriptors of one request are decided all-or-nothing through
// portero.Store.AllowAll: when any enforced descriptor is over its limit,
// the request is OVER_LIMIT and none of its descriptors is counted.
// envoyproxy/ratelimit instead increments every descriptor's counter, even
// for requests it refuses, so a client hammering one limit also drains the
// others; Portero charges only for requests that pass. shadow_mode rules are
// counted when the request passes and never refuse it.
//
// The response carries overall_code, one status per descriptor
// (current_limit, limit_remaining, duration_until_reset) and, in
// response_headers_to_add, RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11) plus Retry-After when over the
// limit, which Envoy copies onto its 429 (and the RateLimit fields onto
// allowed responses).
package rls

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portero-rl/portero/internal/config/envoyconf"
)

// ServiceName is the gRPC name of the rate limit service, also used for its
// health status.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// ServiceOptions tune the gRPC door. The zero value is the default.
type ServiceOptions struct {
	// OnStoreError is what Envoy receives when the store fails: FailError
	// (the default) answers gRPC UNAVAILABLE and lets Envoy's
	// failure_mode_deny decide; FailOpen answers OK; FailClosed answers
	// OVER_LIMIT.
	OnStoreError FailurePolicy
	// CallTimeout bounds one call when the caller's own deadline (Envoy's
	// filter timeout, 20 ms by default) is later or absent. 0 means 1s.
	CallTimeout time.Duration
	// NoHeaders leaves response_headers_to_add empty.
	NoHeaders bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives store failures; nil means slog.Default().
	Logger *slog.Logger
}

// Service implements RateLimitServiceServer over an Engine.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	engine *Engine
	opts   ServiceOptions
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// NewService returns the gRPC door of e.
func NewService(e *Engine, o ServiceOptions) *Service {
	if o.CallTimeout <= 0 {
		o.CallTimeout = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Service{engine: e, opts: o}
}

// ShouldRateLimit implements RateLimitServiceServer. Bad input is
// INVALID_ARGUMENT, an unknown domain NOT_FOUND (unless the engine allows
// unknown domains), a store failure UNAVAILABLE under FailError, and an
// expired deadline DEADLINE_EXCEEDED; none of them is ever answered OK.
func (s *Service) ShouldRateLimit(ctx context.Context, in *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	rb := requestPool.Get().(*requestBlock)
	defer rb.release()
	req, err := rb.fromProto(in)
	if err != nil {
		return nil, err
	}
	resp, err := s.decide(ctx, req)
	if err != nil {
		return nil, err
	}
	return s.toProto(resp), nil
}

// decide is ShouldRateLimit on the engine's types, shared by both
// transports; its errors are gRPC statuses.
func (s *Service) decide(ctx context.Context, req *Request) (*Response, error) {
	parent := ctx
	// Bound the call by CallTimeout unless the caller's deadline (Envoy
	// always sends one) already comes first: then a second timer would
	// never fire and only cost allocations.
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.opts.CallTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.CallTimeout)
		defer cancel()
	}
	resp, err := s.engine.Decide(ctx, s.opts.Now(), req)
	if err != nil {
		var re *RequestError
		if errors.As(err, &re) {
			code := codes.InvalidArgument
			if re.Kind == NotFound {
				code = codes.NotFound
			}
			return nil, status.Error(code, re.Msg)
		}
		if perr := parent.Err(); perr != nil {
			// The caller gave up: its answer no longer matters.
			return nil, status.FromContextError(perr).Err()
		}
		s.opts.Logger.Warn("rls: store failed", "domain", req.Domain, "policy", s.opts.OnStoreError.String(), "err", err)
		resp = s.engine.FailureResponse(req, s.opts.OnStoreError, err)
		if resp == nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, status.Errorf(codes.Unavailable, "store did not answer within %v: %v", s.opts.CallTimeout, err)
			}
			return nil, status.Errorf(codes.Unavailable, "store unavailable: %v", err)
		}
	}
	return resp, nil
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
	req     Request
	descs   [inlineDescriptors]Descriptor
	entries [inlineEntries]envoyconf.Entry
	hits    [inlineDescriptors]uint64
}

var requestPool = sync.Pool{New: func() any { return new(requestBlock) }}

// release clears rb, so that the pool keeps no strings of the request
// alive, and puts it back.
func (rb *requestBlock) release() {
	*rb = requestBlock{}
	requestPool.Put(rb)
}

func fromProto(in *pb.RateLimitRequest) (*Request, error) {
	return new(requestBlock).fromProto(in)
}

func (rb *requestBlock) fromProto(in *pb.RateLimitRequest) (*Request, error) {
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
		req.Descriptors = make([]Descriptor, len(pds))
	}
	entries := rb.entries[:0:inlineEntries]
	if n > inlineEntries {
		entries = make([]envoyconf.Entry, 0, n)
	}
	for i, d := range pds {
		if d == nil {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: empty", i)
		}
		if d.GetIsNegativeHits() {
			return nil, errNegativeHits(i)
		}
		out := &req.Descriptors[i]
		start := len(entries)
		for _, e := range d.GetEntries() {
			entries = append(entries, envoyconf.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		out.Entries = entries[start:len(entries):len(entries)]
		if l := d.GetLimit(); l != nil {
			out.Override = &Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: envoyconf.Unit(l.GetUnit())}
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

// errNegativeHits refuses descriptor i's is_negative_hits, on both
// transports.
func errNegativeHits(i int) error {
	return status.Errorf(codes.InvalidArgument, "descriptor %d: is_negative_hits (refunds) is not supported by Portero", i)
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

func (s *Service) toProto(r *Response) *pb.RateLimitResponse {
	n := len(r.Statuses)
	blk := new(responseBlock)
	out := &blk.out
	out.OverallCode = pb.RateLimitResponse_Code(r.Code)
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
	for i := range r.Statuses {
		st := &r.Statuses[i]
		ps := &sts[i]
		ps.Code = pb.RateLimitResponse_Code(st.Code)
		ps.LimitRemaining = uint32(min(max(st.Remaining, 0), math.MaxUint32))
		if l := st.Limit; l != nil {
			cl := &limits[i]
			cl.Name, cl.RequestsPerUnit, cl.Unit = l.PolicyName(), l.RequestsPerUnit, pb.RateLimitResponse_RateLimit_Unit(l.Unit)
			ps.CurrentLimit = cl
			// As durationpb.New: whole seconds and the nanoseconds left.
			d := &durs[i]
			d.Seconds, d.Nanos = int64(st.ResetAfter/time.Second), int32(st.ResetAfter%time.Second)
			ps.DurationUntilReset = d
		}
		out.Statuses[i] = ps
	}
	if !s.opts.NoHeaders {
		var buf [maxHeaders]Header
		hs := r.appendHeaders(buf[:0])
		if len(hs) > 0 {
			out.ResponseHeadersToAdd = blk.headers[:len(hs)]
			for i, h := range hs {
				hv := &blk.hvs[i]
				hv.Key, hv.Value = h.Name, h.Value
				out.ResponseHeadersToAdd[i] = hv
			}
		}
	}
	return out
}

// ToRequest converts the protobuf request (for tools and tests that hold
// one) into the engine's form.
func ToRequest(in *pb.RateLimitRequest) (*Request, error) { return fromProto(in) }
