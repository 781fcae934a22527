package httplimit_test

import (
	"context"
	"maps"
	"testing"

	"github.com/portero-rl/portero/httplimit"
)

// TestWithIdentities: the values are added to those already in the
// context (a new value for a name wins), the caller's map is not kept,
// and two values cost what one WithIdentity does.
func TestWithIdentities(t *testing.T) {
	base := httplimit.WithIdentity(context.Background(), "user", "alice")
	vals := map[string]string{"api_key": "acme", "user": "bob"}
	ctx := httplimit.WithIdentities(base, vals)
	vals["plan"] = "gold"
	if got, want := httplimit.Identity(ctx), map[string]string{"api_key": "acme", "user": "bob"}; !maps.Equal(got, want) {
		t.Errorf("Identity = %v, want %v", got, want)
	}
	if got := httplimit.Identity(base); !maps.Equal(got, map[string]string{"user": "alice"}) {
		t.Errorf("the parent's identity changed: %v", got)
	}
	one := testing.AllocsPerRun(100, func() { httplimit.WithIdentity(base, "api_key", "acme") })
	two := testing.AllocsPerRun(100, func() {
		httplimit.WithIdentities(base, map[string]string{"api_key": "acme", "plan": "gold"})
	})
	if two > one {
		t.Errorf("WithIdentities of two values allocates %v times, WithIdentity of one %v: want no more", two, one)
	}
}
