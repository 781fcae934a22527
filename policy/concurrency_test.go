package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/policy"
)

// A concurrency rule compiles into a hit of cost 1 whose engine rule is a
// concurrency limit, announced with its unit and no window; its key says
// whose limit it is (the client's: 429; the service's: 503).
func TestConcurrencyRule(t *testing.T) {
	p := mustPolicy(t,
		policy.Rule{Name: "per-key", Key: policy.MustParseKey("header:X-Key"), Concurrency: portero.ConcurrencyRule{Max: 2, TTL: 30 * time.Second}},
		policy.Rule{Name: "service", Key: policy.MustParseKey("global"), Concurrency: portero.ConcurrencyRule{Max: 400}},
		policy.Rule{Name: "rate", Key: policy.MustParseKey("ip"), Limit: portero.PerMinute(10)},
	)
	r := req("GET", "/", "192.0.2.1")
	r.Header["X-Key"] = []string{"k"}
	hits, _, err := p.Compile(r, nil, nil)
	if err != nil || len(hits) != 3 {
		t.Fatalf("Compile = %v, %d hits", err, len(hits))
	}
	for i, want := range []struct {
		conc, service bool
		announce      string
	}{
		{true, false, `"per-key";q=2;qu="concurrent-requests"`},
		{true, true, `"service";q=400;qu="concurrent-requests"`},
		{false, false, `"rate";q=10;w=60`},
	} {
		er := hits[i].Rule
		if er.IsConcurrency() != want.conc || er.Service != want.service || er.Announce.Policy != want.announce || hits[i].Cost != 1 {
			t.Errorf("hit %d (%s): concurrency %v service %v announce %q cost %d; want %v %v %q 1",
				i, er.Name, er.IsConcurrency(), er.Service, er.Announce.Policy, hits[i].Cost, want.conc, want.service, want.announce)
		}
	}
	if c := p.Rules()[0].Engine().Concurrency; c.Name != "per-key" || c.Max != 2 || c.TTL != 30*time.Second {
		t.Errorf("per-key's lease rule = %+v", c)
	}
	if sr := p.Rules()[0].StoreRule(); sr != (portero.Rule{Name: "per-key"}) {
		t.Errorf("StoreRule of a concurrency rule = %+v, want its name only", sr)
	}
	// What a caller has left lists the rate rule only: work in flight is
	// no quota, and a lease cannot be looked at.
	if lim, _ := p.Limits(r, true, nil); len(lim) != 1 || lim[0].Rule.Name != "rate" {
		t.Errorf("Limits = %d hits, want the rate rule's alone", len(lim))
	}
}

func TestConcurrencyRuleErrors(t *testing.T) {
	cost, _ := policy.ParseCost("2")
	key := policy.MustParseKey("ip")
	for _, tc := range []struct {
		r    policy.Rule
		want string
	}{
		{policy.Rule{Name: "a", Key: key, Limit: portero.PerMinute(1), Concurrency: portero.ConcurrencyRule{Max: 1}}, "no algorithm and no limit"},
		{policy.Rule{Name: "a", Key: key, Algorithm: portero.TokenBucket, Concurrency: portero.ConcurrencyRule{Max: 1}}, "no algorithm and no limit"},
		{policy.Rule{Name: "a", Key: key, Cost: cost, Concurrency: portero.ConcurrencyRule{Max: 1}}, "no cost"},
		{policy.Rule{Name: "a", Key: key, Concurrency: portero.ConcurrencyRule{Max: 0, TTL: time.Second}}, "max 0: must be positive"},
		{policy.Rule{Name: "a", Key: key, Concurrency: portero.ConcurrencyRule{Max: 1, TTL: 48 * time.Hour}}, "at most 24h"},
		{policy.Rule{Name: "a", Concurrency: portero.ConcurrencyRule{Max: 1}}, "key: required"},
		{policy.Rule{Name: "a", Key: key, Reserve: 5, Concurrency: portero.ConcurrencyRule{Max: 1}}, "no responses, no reserve and no budget"},
		{policy.Rule{Name: "a", Key: key, Budget: time.Second, Concurrency: portero.ConcurrencyRule{Max: 1}}, "no budget"},
	} {
		if _, err := policy.New([]policy.Rule{tc.r}, policy.Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.r, err, tc.want)
		}
	}
}
