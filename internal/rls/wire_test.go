package rls

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero/internal/config/envoyconf"
)

// The wire codec must decide exactly what the generated types decide:
// decode(b) equals fromProto(proto.Unmarshal(b)) and appendResponse(r)
// unmarshals to toProto(r), on random messages and on fuzzed bytes.

// viaProto is the reference: the generated types' path.
func viaProto(b []byte) (*Request, error) {
	in := new(pb.RateLimitRequest)
	if err := proto.Unmarshal(b, in); err != nil {
		return nil, err
	}
	return fromProto(in)
}

// viaWire is the lean transport's path; the result is copied out of the
// pooled block.
func viaWire(b []byte) (*Request, error) {
	rb := new(requestBlock)
	req, err := rb.decode(b)
	if err != nil {
		return nil, err
	}
	out := &Request{Domain: req.Domain, Hits: req.Hits, Descriptors: make([]Descriptor, len(req.Descriptors))}
	for i, d := range req.Descriptors {
		out.Descriptors[i] = Descriptor{Entries: append([]envoyconf.Entry(nil), d.Entries...), Override: d.Override}
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
	norm := func(r *Request) {
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
	if err != nil || *req.Descriptors[0].Hits != 7 || *req.Descriptors[0].Override != (Override{RequestsPerUnit: 9, Unit: envoyconf.Unit(typev3.RateLimitUnit_MINUTE)}) {
		t.Fatalf("merged fields: %+v, %v", req.Descriptors, err)
	}
	if _, err := viaWire(cases["negative hits"]); err == nil {
		t.Fatal("is_negative_hits accepted")
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
	limits := []*envoyconf.RateLimit{
		{Name: "per_ip", Unit: envoyconf.Unit(1), RequestsPerUnit: 10},
		{FullKey: "edge.remote_address", Unit: envoyconf.Unit(2), RequestsPerUnit: 1000},
		{Name: "日本 \"quoted\"", Unit: envoyconf.Unit(4), RequestsPerUnit: math.MaxUint32},
		{Name: "zero", Unit: envoyconf.Unit(0), RequestsPerUnit: 0},
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, noHeaders := range []bool{false, true} {
		s := &Service{opts: ServiceOptions{NoHeaders: noHeaders}}
		for range 3000 {
			resp := newResponse(r.IntN(5))
			resp.Code = Code(r.IntN(3))
			for i := range resp.Statuses {
				st := &resp.Statuses[i]
				st.Code = Code(r.IntN(3))
				if r.IntN(4) > 0 {
					st.Limit = limits[r.IntN(len(limits))]
				}
				st.Shadow, st.Unlimited = r.IntN(8) == 0, r.IntN(8) == 0
				st.Remaining = r.Int64N(1<<34) - 1<<30
				st.ResetAfter = time.Duration(r.Int64N(int64(3 * time.Hour)))
				if r.IntN(5) == 0 {
					st.ResetAfter = time.Duration(r.IntN(3)) * time.Second
				}
				st.RetryAfter = time.Duration(r.Int64N(int64(time.Minute)))
			}
			got := s.appendResponse([]byte("prefix"), resp)
			if !bytes.HasPrefix(got, []byte("prefix")) {
				t.Fatal("appendResponse did not append")
			}
			want := s.toProto(resp)
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
}
