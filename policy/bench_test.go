package policy_test

import (
	"context"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/policy"
)

// allowAll admits every hit without allocating, so that the benchmarks
// measure the policy alone: matching, keys, costs and the verdict.
type allowAll struct{ decs []portero.Decision }

func (s *allowAll) AllowAll(_ context.Context, _ time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	for i := range hits {
		s.decs[i] = portero.Decision{Allowed: true, Limit: 100, Remaining: 50}
	}
	return s.decs[:len(hits)], nil
}
func (s *allowAll) Peek(context.Context, portero.Rule, string, time.Time, int64) (portero.Decision, error) {
	return portero.Decision{Allowed: true, Limit: 100, Remaining: 50}, nil
}
func (s *allowAll) Reset(context.Context, portero.Rule, string) error { return nil }
func (s *allowAll) Close(context.Context) error                       { return nil }

// BenchmarkEvaluate measures one evaluation of four stacked rules (by ip,
// by API key, by host and route, global) with a store that does nothing:
// Compile alone (matching, keys, costs), and Compile then engine.Decide into
// a reused Verdict, as the middleware does with its pool.
func BenchmarkEvaluate(b *testing.B) {
	p, err := policy.New([]policy.Rule{
		{Name: "per-ip", Key: policy.MustParseKey("ip"), Limit: portero.MustParseLimit("100/s")},
		{Name: "per-key", Key: policy.MustParseKey("header:X-API-Key"), Limit: portero.MustParseLimit("100/s")},
		{Name: "login", Match: policy.Match{Methods: []string{"POST"}, Path: "/login", Host: "*.example.com"},
			Key: policy.MustParseKey("ip"), Limit: portero.MustParseLimit("3/min")},
		{Name: "per-host-route", Match: policy.Match{Path: "/items/{id}", Host: "*.example.com"},
			Key: policy.MustParseKey("host+route"), Limit: portero.MustParseLimit("1000/s")},
		{Name: "global", Key: policy.MustParseKey("global"), Limit: portero.MustParseLimit("10000/s")},
	}, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	req := &policy.Request{Method: "GET", Host: "api.example.com:443", Path: "/items/42",
		Header: http.Header{"X-Api-Key": {"k-123"}}, ClientIP: netip.MustParseAddr("2001:db8::1"), Route: "items"}
	store := &allowAll{decs: make([]portero.Decision, 8)}
	ctx, now := context.Background(), time.Now()
	b.Run("Compile", func(b *testing.B) {
		var hits []engine.Hit
		var keys []byte
		b.ReportAllocs()
		for b.Loop() {
			hits, keys, err = p.Compile(req, hits[:0], keys)
			if err != nil || len(hits) != 4 {
				b.Fatalf("%v, %d hits", err, len(hits))
			}
		}
	})
	b.Run("EvaluateInto", func(b *testing.B) {
		e, err := engine.New(engine.Options{Store: store})
		if err != nil {
			b.Fatal(err)
		}
		var hits []engine.Hit
		var keys []byte
		var v engine.Verdict
		b.ReportAllocs()
		for b.Loop() {
			hits, keys, err = p.Compile(req, hits[:0], keys)
			if err == nil {
				err = e.Decide(ctx, now, hits, &v)
			}
			if err != nil || len(v.Results) != 4 {
				b.Fatalf("%v, %d results", err, len(v.Results))
			}
		}
	})
}
