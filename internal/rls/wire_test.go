package rls

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	hdr "github.com/portero-rl/portero/engine/header"
)

// The wire codec must decide exactly what the generated types decide:
// decode(b) equals fromProto(proto.Unmarshal(b)) and appendResponse(r)
// unmarshals to toProto(r), on random messages and on fuzzed bytes.

// viaProto is the reference: the generated types' path.
func viaProto(b []byte) (*descriptor.Request, error) {
	in := new(pb.RateLimitRequest)
	if err := proto.Unmarshal(b, in); err != nil {
		return nil, err
	}
	return new(requestBlock).fromProto(in)
}

// viaWire is the lean transport's path; the result is copied out of the
// pooled block.
func viaWire(b []byte) (*descriptor.Request, error) {
	rb := new(requestBlock)
	req, err := rb.decode(b)
	if err != nil {
		return nil, err
	}
	out := &descriptor.Request{Domain: req.Domain, Hits: req.Hits, Descriptors: make([]descriptor.Descriptor, len(req.Descriptors))}
	for i, d := range req.Descriptors {
		out.Descriptors[i] = descriptor.Descriptor{Entries: append([]descriptor.Entry(nil), d.Entries...), Override: d.Override, Negative: d.Negative}
		if d.Hits != nil {
			h := *d.Hits
			out.Descriptors[i].Hits = &h
		}
	}
	return out, nil
}

// sameRequest compares two decoded requests; nil and empty entry lists
// are the same.
func sameRequest(t *testing.T, b []byte) {
	t.Helper()
	want, werr := viaProto(b)
	got, gerr := viaWire(b)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("bytes %x: generated types err = %v, wire err = %v", b, werr, gerr)
	}
	if werr != nil {
		return
	}
	norm := func(r *descriptor.Request) {
		for i := range r.Descriptors {
			if len(r.Descriptors[i].Entries) == 0 {
				r.Descriptors[i].Entries = nil
			}
		}
		if len(r.Descriptors) == 0 {
			r.Descriptors = nil
		}
	}
	norm(want)
	norm(got)
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("bytes %x:\n generated types %+v\n wire            %+v", b, *want, *got)
	}
}

var wireStrings = []string{"", "a", "remote_address", "10.0.0.1", "héllo", "日本", "x-api-key", "generic_key", string(make([]byte, 200))}

func randomRequest(r *rand.Rand) *pb.RateLimitRequest {
	in := &pb.RateLimitRequest{Domain: wireStrings[r.IntN(len(wireStrings))], HitsAddend: uint32(r.IntN(3)) * uint32(r.IntN(1<<20))}
	for range r.IntN(7) {
		d := &commonv3.RateLimitDescriptor{}
		for range r.IntN(5) {
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: wireStrings[r.IntN(len(wireStrings))], Value: wireStrings[r.IntN(len(wireStrings))]})
		}
		if r.IntN(3) == 0 {
			d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(r.IntN(1000)), Unit: typev3.RateLimitUnit(r.IntN(8) - 1)}
		}
		if r.IntN(3) == 0 {
			d.HitsAddend = wrapperspb.UInt64(uint64(r.IntN(3)) * r.Uint64N(1<<40))
		}
		d.IsNegativeHits = r.IntN(10) == 0
		in.Descriptors = append(in.Descriptors, d)
	}
	return in
}

func TestWireDecodeMatchesGeneratedTypes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		b, err := proto.Marshal(randomRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		sameRequest(t, b)
		// Fields repeated (scalars: last wins; messages: merged), unknown
		// fields of every wire type, and truncations.
		extra, _ := proto.Marshal(randomRequest(r))
		sameRequest(t, append(append([]byte(nil), b...), extra...))
		var unk []byte
		unk = protowire.AppendTag(unk, 9, protowire.VarintType)
		unk = protowire.AppendVarint(unk, 7)
		unk = protowire.AppendTag(unk, 1, protowire.VarintType) // domain's number, wrong type
		unk = protowire.AppendVarint(unk, 1)
		unk = protowire.AppendTag(unk, 10, protowire.Fixed64Type)
		unk = protowire.AppendFixed64(unk, 1)
		sameRequest(t, append(unk, b...))
		if len(b) > 0 {
			sameRequest(t, b[:r.IntN(len(b))])
			c := append([]byte(nil), b...)
			c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
			sameRequest(t, c)
		}
		if i == 0 {
			sameRequest(t, nil)
		}
	}
}

func TestWireDecodeEdgeCases(t *testing.T) {
	enc := func(m proto.Message) []byte { b, _ := proto.Marshal(m); return b }
	desc := func(d *commonv3.RateLimitDescriptor) []byte {
		return enc(&pb.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{d}})
	}
	entry := []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}
	cases := map[string][]byte{
		"empty hits_addend message is check-only": desc(&commonv3.RateLimitDescriptor{Entries: entry, HitsAddend: &wrapperspb.UInt64Value{}}),
		"negative hits":     desc(&commonv3.RateLimitDescriptor{Entries: entry, IsNegativeHits: true}),
		"empty descriptor":  enc(&pb.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{{}}}),
		"invalid UTF-8 key": desc(&commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "\xff"}}}),
		"beyond inline storage": enc(&pb.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: entry}, {Entries: entry}, {Entries: entry}, {Entries: entry},
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "a"}, {Key: "b"}, {Key: "c"}, {Key: "d"}, {Key: "e"}}, HitsAddend: wrapperspb.UInt64(3)},
		}}),
	}
	// is_negative_hits set, then cleared: the last value wins.
	neg := desc(&commonv3.RateLimitDescriptor{Entries: entry, IsNegativeHits: true})
	cleared := protowire.AppendTag(nil, descIsNegativeHits, protowire.VarintType)
	cleared = protowire.AppendVarint(cleared, 0)
	inner := append(enc(&commonv3.RateLimitDescriptor{Entries: entry, IsNegativeHits: true}), cleared...)
	twice := protowire.AppendTag(enc(&pb.RateLimitRequest{Domain: "d"}), reqDescriptors, protowire.BytesType)
	cases["negative hits cleared"] = protowire.AppendBytes(twice, inner)
	cases["negative hits"] = neg
	// hits_addend and limit twice in one descriptor: merged, last value wins.
	merged := enc(&commonv3.RateLimitDescriptor{Entries: entry, HitsAddend: wrapperspb.UInt64(5),
		Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}})
	merged = append(merged, enc(&commonv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(7),
		Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 9}})...)
	twice = protowire.AppendTag(enc(&pb.RateLimitRequest{Domain: "d"}), reqDescriptors, protowire.BytesType)
	cases["fields merged"] = protowire.AppendBytes(twice, merged)
	for name, b := range cases {
		t.Run(name, func(t *testing.T) { sameRequest(t, b) })
	}
	// The check-only case must really be check-only.
	req, err := viaWire(cases["empty hits_addend message is check-only"])
	if err != nil || req.Descriptors[0].Hits == nil || *req.Descriptors[0].Hits != 0 {
		t.Fatalf("empty hits_addend: %+v, %v", req, err)
	}
	req, err = viaWire(cases["fields merged"])
	if err != nil || *req.Descriptors[0].Hits != 7 || *req.Descriptors[0].Override != (descriptor.Override{RequestsPerUnit: 9, Unit: descriptor.Unit(typev3.RateLimitUnit_MINUTE)}) {
		t.Fatalf("merged fields: %+v, %v", req.Descriptors, err)
	}
	// is_negative_hits is decoded; the compiler refuses it (or, under
	// envoyproxy/ratelimit's compatibility, ignores it).
	if req, err := viaWire(cases["negative hits"]); err != nil || !req.Descriptors[0].Negative {
		t.Fatalf("is_negative_hits: %+v, %v", req, err)
	}
	if req, err := viaWire(cases["negative hits cleared"]); err != nil || req.Descriptors[0].Negative {
		t.Fatalf("is_negative_hits cleared: %+v, %v", req, err)
	}
}

func FuzzWireDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		b, _ := proto.Marshal(randomRequest(r))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameRequest(t, b) })
}

func TestWireResponseMatchesGeneratedTypes(t *testing.T) {
	mk := func(s descriptor.LimitSpec) *descriptor.Limit {
		l, err := descriptor.NewLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	limits := []*descriptor.Limit{
		mk(descriptor.LimitSpec{Name: "per_ip", Unit: descriptor.Second, RequestsPerUnit: 10}),
		mk(descriptor.LimitSpec{FullKey: "edge.remote_address", Unit: descriptor.Minute, RequestsPerUnit: 1000}),
		mk(descriptor.LimitSpec{Name: `quoted "name"`, Unit: descriptor.Day, RequestsPerUnit: math.MaxUint32}),
		mk(descriptor.LimitSpec{Name: "zero", Unit: descriptor.Second}),
		{Name: "日本", Unit: descriptor.Hour, RequestsPerUnit: 3}, // a name from the wire, not the header writer's
	}
	fields := []string{`"per_ip";q=10;w=1`, "", "12", `"a";r=1;t=2, "b";r=0;t=1`}
	r := rand.New(rand.NewPCG(5, 6))
	for range 3000 {
		a := new(answer)
		a.code = descriptor.Code(r.IntN(3))
		for range r.IntN(5) {
			var st descriptor.Status
			st.Code = descriptor.Code(r.IntN(3))
			if r.IntN(4) > 0 {
				st.Limit = limits[r.IntN(len(limits))]
			}
			if r.IntN(6) == 0 {
				st.Failure = portero.FailAllow
			}
			st.Shadow, st.Unlimited = r.IntN(8) == 0, r.IntN(8) == 0
			st.Remaining = r.Int64N(1<<34) - 1<<30
			st.ResetAfter = time.Duration(r.Int64N(int64(3 * time.Hour)))
			if r.IntN(5) == 0 {
				st.ResetAfter = time.Duration(r.IntN(3)) * time.Second
			}
			st.RetryAfter = time.Duration(r.Int64N(int64(time.Minute)))
			a.statuses = append(a.statuses, st)
		}
		for k := range r.IntN(5) {
			v := fields[r.IntN(len(fields))]
			f := hdr.Field{Name: []string{"RateLimit-Policy", "RateLimit", "Retry-After", "X"}[k%4]}
			if r.IntN(2) == 0 {
				f.Static = v
			} else {
				f.Start = len(a.buf)
				a.buf = append(a.buf, v...)
				f.End, f.Dynamic = len(a.buf), true
			}
			a.fields = append(a.fields, f)
		}
		got := appendResponse([]byte("prefix"), a)
		if !bytes.HasPrefix(got, []byte("prefix")) {
			t.Fatal("appendResponse did not append")
		}
		want := toProto(a)
		var back pb.RateLimitResponse
		if err := proto.Unmarshal(got[len("prefix"):], &back); err != nil {
			t.Fatalf("wire response does not parse: %v", err)
		}
		if !proto.Equal(&back, want) {
			t.Fatalf("wire response\n %v\nwant\n %v", &back, want)
		}
		// Byte for byte what proto.Marshal writes.
		wb, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[len("prefix"):], wb) {
			t.Fatalf("wire bytes %x\nproto bytes %x", got[len("prefix"):], wb)
		}
	}
}

// TestWireInterceptor: wireShouldRateLimit answers the same with a unary
// interceptor as without (the interceptor sees the *wireCall and the
// method), and its handler decides exactly once.
func TestWireInterceptor(t *testing.T) {
	svc := directService(t)
	in, err := proto.Marshal(&pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "10.2.2.2")}})
	if err != nil {
		t.Fatal(err)
	}
	dec := func(v any) error {
		v.(*wireCall).in = mem.SliceBuffer(in)
		return nil
	}
	remaining := func(out any, err error) uint32 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		c := out.(*wireCall)
		resp := new(pb.RateLimitResponse)
		if err := proto.Unmarshal(c.out, resp); err != nil {
			t.Fatal(err)
		}
		c.free()
		return resp.Statuses[0].LimitRemaining
	}
	ctx := context.Background()
	if got := remaining(wireShouldRateLimit(svc, ctx, dec, nil)); got != 9 {
		t.Fatalf("without interceptor: remaining %d, want 9", got)
	}
	var calls int
	icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		calls++
		if _, ok := req.(*wireCall); !ok || info.FullMethod != methodShouldRateLimit {
			t.Errorf("interceptor got %T, %q; want *wireCall, %q", req, info.FullMethod, methodShouldRateLimit)
		}
		return h(ctx, req)
	}
	if got := remaining(wireShouldRateLimit(svc, ctx, dec, icpt)); got != 8 {
		t.Fatalf("with interceptor: remaining %d, want 8", got)
	}
	if calls != 1 {
		t.Fatalf("interceptor called %d times, want 1", calls)
	}
}
