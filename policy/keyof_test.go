package policy_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/policy/policytest"
)

// TestKeyOf: KeyOf builds, for every key part, the key Evaluate builds for
// a rule with that key and match (IPv6 grouped by the policy's prefix, the
// route falling back to the rule's pattern), and reports a missing part.
func TestKeyOf(t *testing.T) {
	exprs := []string{"ip", "header:X-API-Key+method", "tenant+user", "identity:plan", "route", "host", "global", "ip+route"}
	var rules []policy.Rule
	for i, e := range exprs {
		rules = append(rules, policy.Rule{Name: string(rune('a' + i)), Match: policy.Match{Path: "/users/{id}"}, Key: policy.MustParseKey(e), Limit: portero.PerMinute(100)})
	}
	p, err := policy.New(rules, policy.Options{IPv6Prefix: 48})
	if err != nil {
		t.Fatal(err)
	}
	full := req("GET", "/users/7", "2001:db8:1:2:3:4:5:6")
	full.Header["X-Api-Key"] = []string{"k+=1"}
	full.Identity = map[string]string{"user": "alice", "tenant": "acme", "plan": "gold"}
	routed := *full
	routed.Route = "users"
	for _, r := range []*policy.Request{full, &routed, req("GET", "/users/7", "")} {
		v, err := evaluate(p, context.Background(), &policytest.Store{}, t0, r)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, res := range v.Results {
			want[res.Rule.Name] = res.Key
		}
		for _, rule := range p.Rules() {
			got, ok := p.KeyOf(rule.Key, &rule.Match, r)
			if w, applies := want[rule.Name]; got != w || ok != applies {
				t.Errorf("KeyOf(%s, route %q) = %q, %v; Evaluate built %q, %v", rule.Key, r.Route, got, ok, w, applies)
			}
		}
	}
	if k, _ := p.KeyOf(policy.MustParseKey("ip"), nil, &policy.Request{ClientIP: netip.MustParseAddr("2001:db8:1:2::9")}); k != "ip=2001:db8:1::/48" {
		t.Errorf("KeyOf(ip) = %q, want the policy's /48", k)
	}
}

func TestPerClient(t *testing.T) {
	for expr, want := range map[string]bool{
		"ip": true, "header:X-API-Key": true, "tenant": true, "user+route": true, "identity:plan": true,
		"global": false, "route": false, "method+host": false,
	} {
		if got := policy.MustParseKey(expr).PerClient(); got != want {
			t.Errorf("PerClient(%s) = %v, want %v", expr, got, want)
		}
	}
}
