package rlsxds

import (
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/portero-rl/portero/internal/config/envoyconf"
)

func resources(t *testing.T, cs ...*rlsconf.RateLimitConfig) []*anypb.Any {
	t.Helper()
	out := make([]*anypb.Any, len(cs))
	for i, c := range cs {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = a
	}
	return out
}

// TestParse: every field of a RateLimitConfig reaches the configuration
// as the same YAML would (unlimited without a unit, names and replaces,
// shadow and quota mode, detailed metrics, metadata, nesting), and a bad
// resource is an error naming it.
func TestParse(t *testing.T) {
	md, _ := structpb.NewStruct(map[string]any{"team": "a"})
	good := &rlsconf.RateLimitConfig{Name: "edge-config", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "internal", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		{Key: "user", DetailedMetric: true, ShadowMode: true, QuotaMode: true, Metadata: md,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 7, Name: "per_user"}},
		{Key: "api_key", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "plan", Value: "gold",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 100, Replaces: []*rlsconf.RateLimitReplace{{Name: "per_user"}}}}}},
	}}
	c, err := Parse(resources(t, good), envoyconf.Options{Envoyproxy: true})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("edge")
	if d == nil || len(d.Nodes) != 3 {
		t.Fatalf("domains %v", c.Domains())
	}
	if l := d.Nodes[0].Limit; l == nil || !l.Unlimited {
		t.Errorf("internal: %+v, want unlimited", l)
	}
	u := d.Nodes[1]
	if l := u.Limit; l == nil || l.Name != "per_user" || l.RequestsPerUnit != 7 || !u.ShadowMode || !u.QuotaMode || !u.DetailedMetric || u.Metadata["team"] != "a" {
		t.Errorf("user: %+v %+v", u, u.Limit)
	}
	if l := d.Nodes[2].Children[0].Limit; l == nil || l.FullKey != "edge.api_key.plan_gold" || len(l.Replaces) != 1 {
		t.Errorf("api_key.plan_gold: %+v", l)
	}
	bad := &rlsconf.RateLimitConfig{Name: "broken", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 3}}}}
	if _, err := Parse(resources(t, bad), envoyconf.Options{Envoyproxy: true}); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("a limit without a unit: %v, want an error naming the resource", err)
	}
}
