package rls

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/rlsstats"
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

func (nopStore) Peek(_ context.Context, r portero.Rule, _ string, _ time.Time, _ int64) (portero.Decision, error) {
	return portero.Decision{Allowed: true, Limit: r.Limit.Count, Remaining: r.Limit.Count - 1}, nil
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

// benchService returns the service over st with the bench configuration.
func benchService(b *testing.B, st portero.Store, o ServiceOptions) *Service {
	b.Helper()
	lim, err := envoyconf.Parse([]envoyconf.Source{{Name: "bench.yaml", Data: []byte(benchConfig)}}, envoyconf.Options{})
	if err != nil {
		b.Fatal(err)
	}
	comp, eng := newDoor(b, st, lim, descriptor.Options{}, "")
	return NewService(comp, eng, o)
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

// BenchmarkEngineDecide is the decision without protobuf and without
// headers: compiling one descriptor of one entry (the bench/ RLS load), or of
// two, deciding it and building its status.
func BenchmarkEngineDecide(b *testing.B) {
	for _, s := range benchStores(b) {
		e := benchService(b, s.st, ServiceOptions{NoHeaders: true, CallTimeout: 2 * time.Hour})
		b.Run(s.name+"/one-entry", func(b *testing.B) {
			reqs := make([]descriptor.Request, benchKeys)
			for i := range reqs {
				reqs[i] = descriptor.Request{Domain: "bench", Descriptors: []descriptor.Descriptor{{Entries: []descriptor.Entry{{Key: "client", Value: benchValues[i]}}}}}
			}
			b.ReportAllocs()
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			for i := 0; b.Loop(); i++ {
				a, err := e.decide(ctx, &reqs[i%benchKeys])
				if err != nil || a.code != descriptor.OK {
					b.Fatal(a, err)
				}
				a.release()
			}
		})
		b.Run(s.name+"/two-entries", func(b *testing.B) {
			reqs := make([]descriptor.Request, benchKeys)
			for i := range reqs {
				reqs[i] = descriptor.Request{Domain: "bench", Descriptors: []descriptor.Descriptor{{Entries: []descriptor.Entry{{Key: "api_key", Value: benchValues[i]}, {Key: "plan", Value: "gold"}}}}}
			}
			b.ReportAllocs()
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			for i := 0; b.Loop(); i++ {
				a, err := e.decide(ctx, &reqs[i%benchKeys])
				if err != nil || a.code != descriptor.OK {
					b.Fatal(a, err)
				}
				a.release()
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
		for _, dl := range []struct {
			name        string
			callTimeout time.Duration
		}{{"envoy-deadline", 2 * time.Hour}, {"late-deadline", time.Second}} {
			svc := benchService(b, s.st, ServiceOptions{CallTimeout: dl.callTimeout})
			b.Run(s.name+"/"+dl.name, func(b *testing.B) {
				benchLoop(b, svc, 2)
			})
		}
	}
}

// benchLoop calls svc's ShouldRateLimit with one of benchKeys serialized
// requests per iteration. The first answer must be OK and carry headers
// header fields (any number when headers is negative); every answer must
// be OK, which the serialized response's first two bytes tell.
func benchLoop(b *testing.B, svc *Service, headers int) {
	ins := make([][]byte, benchKeys)
	for i := range ins {
		msg, err := proto.Marshal(&pb.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: benchValues[i]}}},
		}})
		if err != nil {
			b.Fatal(err)
		}
		ins[i] = msg
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	out, err := svc.ShouldRateLimit(ctx, ins[0], nil)
	first := new(pb.RateLimitResponse)
	if err == nil {
		err = proto.Unmarshal(out, first)
	}
	if err != nil || first.OverallCode != pb.RateLimitResponse_OK || headers >= 0 && len(first.ResponseHeadersToAdd) != headers {
		b.Fatal(first, err)
	}
	okTag := []byte{respOverallCode<<3 | byte(protowire.VarintType), byte(pb.RateLimitResponse_OK)}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		out, err = svc.ShouldRateLimit(ctx, ins[i%benchKeys], out[:0])
		if err != nil || !bytes.HasPrefix(out, okTag) {
			b.Fatalf("answer %x: %v", out, err)
		}
	}
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkServiceStats is BenchmarkServiceShouldRateLimit (memory store,
// Envoy's deadline) without statistics and with envoyproxy/ratelimit's
// statsd ones (package rlsstats, to a UDP socket on loopback), side by
// side:
//
//	go test -run '^$' -bench ServiceStats -benchmem -count 6 ./internal/rls
func BenchmarkServiceStats(b *testing.B) {
	sink, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	for _, withStats := range []bool{false, true} {
		lim, err := envoyconf.Parse([]envoyconf.Source{{Name: "bench.yaml", Data: []byte(benchConfig)}}, envoyconf.Options{})
		if err != nil {
			b.Fatal(err)
		}
		comp, eng := newDoor(b, newMemStore(b), lim, descriptor.Options{}, "")
		o := ServiceOptions{CallTimeout: 2 * time.Hour}
		name := "off"
		if withStats {
			st, err := rlsstats.New(rlsstats.Options{Addr: sink.LocalAddr().String(), Protocol: "udp", FlushInterval: time.Hour, Limits: comp.Limits})
			if err != nil {
				b.Fatal(err)
			}
			o.Observer, name = st.Observer(true), "statsd"
		}
		svc := NewService(comp, eng, o)
		b.Run(name, func(b *testing.B) {
			benchLoop(b, svc, -1)
		})
	}
}
