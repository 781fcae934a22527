package portero_test

import (
	"strings"
	"testing"

	"github.com/portero-rl/portero"
)

func TestParseFailurePolicy(t *testing.T) {
	for _, p := range portero.FailurePolicies {
		got, err := portero.ParseFailurePolicy(p.String())
		if err != nil || got != p || !got.Valid() {
			t.Errorf("ParseFailurePolicy(%q) = %q, %v; want %q", p, got, err, p)
		}
	}
	for _, tt := range []struct{ in, hint string }{
		{"open", "allow"}, {"fail-open", "allow"}, {"closed", "deny"}, {"fail-closed", "deny"},
		{"Deny", "want allow, deny, local or error"}, {"", "want allow"}, {"magic", "want allow"},
	} {
		got, err := portero.ParseFailurePolicy(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.hint) || got != "" {
			t.Errorf("ParseFailurePolicy(%q) = %q, %v; want an error mentioning %q", tt.in, got, err, tt.hint)
		}
	}
	if portero.FailurePolicy("").Valid() || portero.FailurePolicy("open").Valid() {
		t.Error("Valid accepts a name that is not a policy")
	}
}
