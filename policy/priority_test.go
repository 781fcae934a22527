package policy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// TestPriorities: the first rule whose match selects a request gives its
// class, the fallback otherwise; Headers lists what the matches read; a
// match that does not compile names its rule.
func TestPriorities(t *testing.T) {
	ps, err := policy.NewPriorities([]policy.PriorityRule{
		{Match: policy.Match{Path: "/pay.Payments/*"}, Priority: overload.Critical},
		{Match: policy.Match{Headers: map[string]string{"X-Priority": "low"}}, Priority: overload.Sheddable},
		{Match: policy.Match{Path: "/**", Headers: map[string]string{"X-Priority": "*", "X-Batch": "1"}}, Priority: overload.Sheddable},
	}, overload.Default)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  policy.Request
		want overload.Priority
	}{
		{policy.Request{Path: "/pay.Payments/Charge", Header: map[string][]string{"X-Priority": {"low"}}}, overload.Critical},
		{policy.Request{Path: "/search.Search/Query", Header: map[string][]string{"X-Priority": {"low"}}}, overload.Sheddable},
		{policy.Request{Path: "/search.Search/Query"}, overload.Default},
	} {
		if got := ps.Of(&tc.req); got != tc.want {
			t.Errorf("Of(%s %v) = %v, want %v", tc.req.Path, tc.req.Header, got, tc.want)
		}
	}
	if got := strings.Join(ps.Headers(), ","); got != "X-Batch,X-Priority" {
		t.Errorf("Headers() = %s, want X-Batch,X-Priority", got)
	}
	_, err = policy.NewPriorities([]policy.PriorityRule{{Match: policy.Match{Path: "no-slash"}, Priority: overload.Critical}}, overload.Default)
	if err == nil || !strings.Contains(err.Error(), "priority rule 0 (critical)") {
		t.Errorf("a bad match: %v, want an error naming priority rule 0 (critical)", err)
	}
}

// TestIdentity: WithIdentities adds to the values already set (later values
// win) without changing the earlier context's map.
func TestIdentity(t *testing.T) {
	a := policy.WithIdentity(context.Background(), "user", "alice")
	b := policy.WithIdentities(a, map[string]string{"user": "bob", "tenant": "acme"})
	if got := policy.Identity(a); len(got) != 1 || got["user"] != "alice" {
		t.Errorf("Identity(a) = %v, want only user=alice", got)
	}
	if got := policy.Identity(b); got["user"] != "bob" || got["tenant"] != "acme" {
		t.Errorf("Identity(b) = %v, want user=bob tenant=acme", got)
	}
	if got := policy.Identity(context.Background()); got != nil {
		t.Errorf("Identity(empty) = %v, want nil", got)
	}
}
