package rls

import (
	"context"
	"strconv"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config/envoyconf"
)

// The engine benchmarks measure one decision without the network: the
// descriptor lookup, the store call and the response (and, for the Service
// ones, the protobuf conversion both ways and the headers), with the memory
// store or with a store that answers at once (nopStore), so that the
// engine's own cost and allocations show.
//
//	go test -run '^$' -bench . -benchmem ./internal/rls

const benchConfig = `
domain: bench
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: api_key
    descriptors:
      - key: plan
        value: gold
        rate_limit: {name: gold, unit: minute, requests_per_unit: 600}
`

// nopStore allows every hit with the whole limit remaining.
type nopStore struct{}

func (nopStore) AllowAll(_ context.Context, _ time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	out := make([]portero.Decision, len(hits))
	for i, h := range hits {
		out[i] = portero.Decision{Allowed: true, Limit: h.Rule.Limit.Count, Remaining: h.Rule.Limit.Count - h.Cost}
	}
	return out, nil
}

func (nopStore) Close(context.Context) error { return nil }

const benchKeys = 10_000

var benchValues = func() []string {
	vs := make([]string, benchKeys)
	for i := range vs {
		vs[i] = "c" + strconv.Itoa(i)
	}
	return vs
}()

func benchEngine(b *testing.B, st portero.Store) *Engine {
	b.Helper()
	lim, err := envoyconf.Parse([]envoyconf.Source{{Name: "bench.yaml", Data: []byte(benchConfig)}}, envoyconf.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewEngine(Options{Store: st, Limits: lim})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func benchStores(b *testing.B) []struct {
	name string
	st   portero.Store
} {
	return []struct {
		name string
		st   portero.Store
	}{{"nop", nopStore{}}, {"mem", newMemStore(b)}}
}

// BenchmarkEngineDecide is Engine.Decide on one descriptor of one entry
// (the bench/ RLS load) and on one of two entries.
func BenchmarkEngineDecide(b *testing.B) {
	for _, s := range benchStores(b) {
		e := benchEngine(b, s.st)
		b.Run(s.name+"/one-entry", func(b *testing.B) {
			reqs := make([]Request, benchKeys)
			for i := range reqs {
				reqs[i] = Request{Domain: "bench", Descriptors: []Descriptor{{Entries: []envoyconf.Entry{{Key: "client", Value: benchValues[i]}}}}}
			}
			b.ReportAllocs()
			ctx, now := context.Background(), time.Now()
			for i := 0; b.Loop(); i++ {
				resp, err := e.Decide(ctx, now, &reqs[i%benchKeys])
				if err != nil || resp.Code != OK {
					b.Fatal(resp, err)
				}
			}
		})
		b.Run(s.name+"/two-entries", func(b *testing.B) {
			reqs := make([]Request, benchKeys)
			for i := range reqs {
				reqs[i] = Request{Domain: "bench", Descriptors: []Descriptor{{Entries: []envoyconf.Entry{{Key: "api_key", Value: benchValues[i]}, {Key: "plan", Value: "gold"}}}}}
			}
			b.ReportAllocs()
			ctx, now := context.Background(), time.Now()
			for i := 0; b.Loop(); i++ {
				resp, err := e.Decide(ctx, now, &reqs[i%benchKeys])
				if err != nil || resp.Code != OK {
					b.Fatal(resp, err)
				}
			}
		})
	}
}

// BenchmarkServiceShouldRateLimit is the gRPC handler without the network:
// protobuf request in, decision, protobuf response with headers out. With
// "envoy-deadline" the caller's deadline comes before CallTimeout, as
// Envoy's 20 ms does; with "late-deadline" the service sets its own.
func BenchmarkServiceShouldRateLimit(b *testing.B) {
	for _, s := range benchStores(b) {
		eng := benchEngine(b, s.st)
		for _, dl := range []struct {
			name        string
			callTimeout time.Duration
		}{{"envoy-deadline", 2 * time.Hour}, {"late-deadline", time.Second}} {
			svc := NewService(eng, ServiceOptions{CallTimeout: dl.callTimeout})
			b.Run(s.name+"/"+dl.name, func(b *testing.B) {
				ins := make([]*pb.RateLimitRequest, benchKeys)
				for i := range ins {
					ins[i] = &pb.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
						{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: benchValues[i]}}},
					}}
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					out, err := svc.ShouldRateLimit(ctx, ins[i%benchKeys])
					if err != nil || out.OverallCode != pb.RateLimitResponse_OK || len(out.ResponseHeadersToAdd) != 2 {
						b.Fatal(out, err)
					}
				}
			})
		}
	}
}
