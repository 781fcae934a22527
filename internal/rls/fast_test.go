package rls

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/config/envoyconf"
)

// Tests of the allocation-saving paths: requests converted into pooled
// blocks with inline storage, responses built in one block, scratch slices
// reused between calls.

// directService is the service called in-process, without gRPC, at t0.
func directService(t *testing.T) *Service {
	t.Helper()
	c, err := envoyconf.Load(examples, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	comp, eng := newDoor(t, newMemStore(t), c, descriptor.Options{}, "")
	return NewService(comp, eng, ServiceOptions{Now: func() time.Time { return t0 }})
}

func withHits(d *commonv3.RateLimitDescriptor, h uint64) *commonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(h)
	return d
}

// A pooled request block must not carry a descriptor's hits_addend (or
// anything else) into the next request.
func TestPooledRequestIsCleared(t *testing.T) {
	svc := directService(t)
	ctx := context.Background()
	call := func(d *commonv3.RateLimitDescriptor) *pb.RateLimitResponse {
		t.Helper()
		resp, err := svc.shouldRateLimitProto(ctx, &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := 0; i < 3; i++ {
		// Check-only (hits_addend 0), then counted: remaining 10, then 9-i.
		if got := call(withHits(desc("remote_address", "10.1.1.1"), 0)).Statuses[0].LimitRemaining; got != uint32(10-i) {
			t.Fatalf("round %d: check-only remaining %d, want %d", i, got, 10-i)
		}
		if got := call(desc("remote_address", "10.1.1.1")).Statuses[0].LimitRemaining; got != uint32(9-i) {
			t.Fatalf("round %d: counted remaining %d, want %d (a stale hits_addend 0 would leave it uncounted)", i, got, 9-i)
		}
	}
}

// Requests larger than the inline storage (descriptors, entries, statuses)
// convert and answer as small ones do.
func TestBeyondInlineStorage(t *testing.T) {
	in := &pb.RateLimitRequest{Domain: "edge", HitsAddend: 2}
	want := &descriptor.Request{Domain: "edge", Hits: 2}
	for i := 0; i < inlineDescriptors+3; i++ {
		ip := fmt.Sprintf("10.2.0.%d", i)
		var d *commonv3.RateLimitDescriptor
		var wd descriptor.Descriptor
		if i%2 == 0 {
			d = desc("api_key", "k"+ip, "plan", "gold")
			wd.Entries = []descriptor.Entry{{Key: "api_key", Value: "k" + ip}, {Key: "plan", Value: "gold"}}
		} else {
			d = desc("remote_address", ip)
			wd.Entries = []descriptor.Entry{{Key: "remote_address", Value: ip}}
		}
		if i%3 == 0 {
			withHits(d, uint64(i+1))
			h := uint64(i + 1)
			wd.Hits = &h
		}
		in.Descriptors = append(in.Descriptors, d)
		want.Descriptors = append(want.Descriptors, wd)
	}
	msg, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := new(requestBlock).decode(msg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Domain != want.Domain || got.Hits != want.Hits || len(got.Descriptors) != len(want.Descriptors) {
		t.Fatalf("decode = %+v, want %+v", got, want)
	}
	for i, d := range got.Descriptors {
		w := want.Descriptors[i]
		if fmt.Sprint(d.Entries) != fmt.Sprint(w.Entries) || (d.Hits == nil) != (w.Hits == nil) || (d.Hits != nil && *d.Hits != *w.Hits) {
			t.Errorf("descriptor %d = %v hits %v, want %v hits %v", i, d.Entries, d.Hits, w.Entries, w.Hits)
		}
	}

	svc := directService(t)
	resp, err := svc.shouldRateLimitProto(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != pb.RateLimitResponse_OK || len(resp.Statuses) != len(in.Descriptors) {
		t.Fatalf("response: %v", resp)
	}
	for i, st := range resp.Statuses {
		cost := uint32(2)
		if w := want.Descriptors[i].Hits; w != nil {
			cost = uint32(*w)
		}
		name, limit := "gold", uint32(600)
		if i%2 == 1 {
			name, limit = "edge.remote_address", 10
		}
		if st.Code != pb.RateLimitResponse_OK || st.CurrentLimit.GetName() != name || st.LimitRemaining != limit-cost {
			t.Errorf("status %d = %v, want OK under %s with %d remaining", i, st, name, limit-cost)
		}
		if st.DurationUntilReset.AsDuration() <= 0 {
			t.Errorf("status %d: duration_until_reset %v", i, st.DurationUntilReset.AsDuration())
		}
	}
	if got := header(resp, "RateLimit-Policy"); got != `"gold";q=600;w=60, "edge.remote_address";q=10;w=1` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
}

// duration_until_reset is built in place as durationpb.New builds it.
func TestDurationUntilReset(t *testing.T) {
	svc := directService(t)
	resp, err := svc.shouldRateLimitProto(context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("api_key", "x", "plan", "gold")}})
	if err != nil {
		t.Fatal(err)
	}
	// t0 is 100 ms into a minute: 59.9 s to the end of the minute window.
	d := resp.Statuses[0].DurationUntilReset
	if d.GetSeconds() != 59 || d.GetNanos() != 900_000_000 || d.AsDuration() != 59900*time.Millisecond {
		t.Errorf("duration_until_reset = %v", d)
	}
}

// countingStore counts AllowAll and Peek calls.
type countingStore struct {
	portero.Store
	calls atomic.Int64
}

func (s *countingStore) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	s.calls.Add(1)
	return s.Store.AllowAll(ctx, now, hits)
}

func (s *countingStore) Peek(ctx context.Context, r portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	s.calls.Add(1)
	return s.Store.Peek(ctx, r, key, now, cost)
}

// A request costs one store call in the common cases: one or several
// counted descriptors (AllowAll), one check-only descriptor (Peek), a
// refused request; two only when it mixes counted and check-only
// descriptors.
func TestOneStoreCallPerRequest(t *testing.T) {
	forEachTransport(t, func(t *testing.T, transport string) {
		st := &countingStore{Store: newMemStore(t)}
		e := start(t, setup{transport: transport, store: st})
		for _, tt := range []struct {
			name  string
			ds    []*commonv3.RateLimitDescriptor
			calls int64
		}{
			{"one descriptor", []*commonv3.RateLimitDescriptor{desc("remote_address", "10.3.0.1")}, 1},
			{"two descriptors", []*commonv3.RateLimitDescriptor{desc("remote_address", "10.3.0.2"), desc("api_key", "k", "plan", "gold")}, 1},
			{"check only", []*commonv3.RateLimitDescriptor{withHits(desc("remote_address", "10.3.0.3"), 0)}, 1},
			{"no limit", []*commonv3.RateLimitDescriptor{desc("nothing", "here")}, 0},
			{"counted and check only", []*commonv3.RateLimitDescriptor{desc("remote_address", "10.3.0.4"), withHits(desc("api_key", "k", "plan", "gold"), 0)}, 2},
		} {
			before := st.calls.Load()
			e.call(t, "edge", 1, tt.ds...)
			if got := st.calls.Load() - before; got != tt.calls {
				t.Errorf("%s: %d store calls, want %d", tt.name, got, tt.calls)
			}
		}
		// Refused: still one call.
		ip := desc("remote_address", "10.3.0.5")
		for i := 0; i < 10; i++ {
			e.call(t, "edge", 1, ip)
		}
		before := st.calls.Load()
		if resp := e.call(t, "edge", 1, ip); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("11th call: %v", resp)
		}
		if got := st.calls.Load() - before; got != 1 {
			t.Errorf("refused: %d store calls, want 1", got)
		}
	})
}
