package envoyconf

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/sfv"
)

// refPolicyItem formats a RateLimit-Policy item independently of
// appendPolicyItem: fmt, and quoting by replacement.
func refPolicyItem(r *RateLimit) string {
	name := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(r.PolicyName())
	b := []byte(name)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	s := `"` + string(b) + `"` + fmt.Sprintf(";q=%d;w=%d", r.RequestsPerUnit, int64(r.Unit.Duration()/time.Second))
	if r.Rule.Limit.Burst > 0 {
		s += fmt.Sprintf(";portero-burst=%d", r.Rule.Limit.Burst)
	}
	return s
}

func walkLimits(ds []*Descriptor, f func(*RateLimit)) {
	for _, d := range ds {
		if d.RateLimit != nil && !d.RateLimit.Unlimited {
			f(d.RateLimit)
		}
		walkLimits(d.Descriptors, f)
	}
}

// The header forms computed at load are what formatting them per request
// gave, for every limit of the examples, for limits built by hand (not
// precomputed) and for overrides.
func TestPrecomputedHeaderForms(t *testing.T) {
	c, err := Load(examples, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range c.Domains() {
		walkLimits(c.Domain(name).Descriptors, func(r *RateLimit) {
			n++
			if r.policyItem == "" || r.quotedName == "" {
				t.Errorf("%s: header forms not precomputed", r.PolicyName())
			}
			if got, want := r.PolicyItem(), refPolicyItem(r); got != want {
				t.Errorf("PolicyItem = %q, want %q", got, want)
			}
			if got, want := r.QuotedName(), string(sfv.AppendString(nil, r.PolicyName())); got != want {
				t.Errorf("QuotedName = %q, want %q", got, want)
			}
		})
	}
	if n < 10 {
		t.Fatalf("only %d limits in the examples", n)
	}
	byHand := []*RateLimit{
		{Name: `we"ird\name`, Unit: Minute, RequestsPerUnit: 7},
		{FullKey: "d.k_v\x01é", Unit: Hour, RequestsPerUnit: 1, Rule: portero.Rule{Limit: portero.Limit{Count: 1, Window: time.Hour, Burst: 3}}},
	}
	for _, r := range byHand {
		if got, want := r.PolicyItem(), refPolicyItem(r); got != want {
			t.Errorf("by hand: PolicyItem = %q, want %q", got, want)
		}
	}
	if got := byHand[0].QuotedName(); got != `"we\"ird\\name"` {
		t.Errorf("QuotedName = %q", got)
	}
	o, err := OverrideRule("edge", []Entry{{"remote_address", "10.0.0.1"}}, 42, Day)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := o.PolicyItem(), `"edge.remote_address";q=42;w=86400`; got != want {
		t.Errorf("override PolicyItem = %q, want %q", got, want)
	}
}
