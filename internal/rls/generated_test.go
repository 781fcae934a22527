package rls

import (
	"context"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portero-rl/portero/descriptor"
)

// generatedShouldRateLimit is Service.ShouldRateLimit on the generated
// types, converted field by field without wire.go: the reference that
// wire_test.go holds the codec to, and BenchmarkCodec's alternative.
func generatedShouldRateLimit(s *Service, ctx context.Context, in *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
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

// generatedServer is grpc-go's RateLimitServiceServer over
// generatedShouldRateLimit.
type generatedServer struct {
	pb.UnimplementedRateLimitServiceServer
	svc *Service
}

func (g generatedServer) ShouldRateLimit(ctx context.Context, in *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return generatedShouldRateLimit(g.svc, ctx, in)
}
