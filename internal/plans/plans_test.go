package plans_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/plans"
	"github.com/portero-rl/portero/policy"
)

// TestThrottleLimit: a rate and a burst as a token bucket, the burst
// defaulting to the rate rounded up; what is no limit is said.
func TestThrottleLimit(t *testing.T) {
	for _, tt := range []struct {
		t     plans.Throttle
		want  string
		burst int64
	}{
		{plans.Throttle{Rate: 350}, "350/s", 350},
		{plans.Throttle{Rate: 10000, Burst: 5000}, "10000/s burst 5000", 5000},
		{plans.Throttle{Rate: 0.5}, "1/s burst 1 rate 0.5", 1},
		{plans.Throttle{Rate: 0}, "rate 0: want a positive number of requests per second", 0},
		{plans.Throttle{Rate: 5, Burst: -1}, "burst -1: must not be negative (0 means the rate)", 0},
	} {
		l, burst, err := tt.t.Limit()
		got := l.String()
		if err != nil {
			got = err.Error()
		}
		if got != tt.want || burst != tt.burst {
			t.Errorf("%+v: %s, burst %d; want %s, burst %d", tt.t, got, burst, tt.want, tt.burst)
		}
	}
}

func match(t *testing.T, path string) policy.Match {
	t.Helper()
	m := policy.Match{Path: path}
	if err := m.Compile(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBounds: a level may not promise more than a level above it whose
// scope contains its own; a level beside it (another scope) is no bound.
func TestBounds(t *testing.T) {
	c := plans.NewCompiler()
	global := policy.MustParseKey("global")
	for _, l := range []plans.Level{
		{Rank: plans.Global, Rule: "global", Key: global, Throttle: plans.Throttle{Rate: 100}, What: "global", At: "p.yaml:1:1"},
		{Rank: plans.Stage, Rule: "stage/a", Scope: []policy.Match{match(t, "/a/**")}, Key: global, Throttle: plans.Throttle{Rate: 50}, What: "a", At: "p.yaml:2:1"},
		{Rank: plans.Method, Rule: "method/b", Scope: []policy.Match{match(t, "/b")}, Key: global, Throttle: plans.Throttle{Rate: 80}, What: "b"},
		{Rank: plans.Method, Rule: "method/a", Scope: []policy.Match{match(t, "/a/x")}, Key: global, Throttle: plans.Throttle{Rate: 60, Burst: 40}, What: "ax"},
	} {
		if err := c.Level(l); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, o := range c.Bounds() {
		got = append(got, o.Level.What+": "+o.Msg)
	}
	want := "ax: rate 60/s is more than a allows (50/s, p.yaml:2:1): a lower level must not promise more than the level above it"
	if strings.Join(got, "\n") != want {
		t.Errorf("bounds:\n%s\nwant\n%s", strings.Join(got, "\n"), want)
	}
	if len(c.Rules) != 4 || c.Model.Levels["method/a"] != "method" || c.Model.Levels["global"] != "global" {
		t.Errorf("rules %d, levels %v", len(c.Rules), c.Model.Levels)
	}
}

// TestAddKey: a key joins the set when its plan exists and its caller has
// no other plan; otherwise the field it is wrong in is named.
func TestAddKey(t *testing.T) {
	c := plans.NewCompiler()
	c.Model.Plans["gold"] = &plans.Plan{Name: "gold"}
	c.Model.Plans["basic"] = &plans.Plan{Name: "basic"}
	c.Model.Keys = apikey.NewSet(0)
	for _, tt := range []struct {
		e         apikey.Entry
		field, in string
	}{
		{apikey.Entry{ID: "acme", Plan: "gold", SHA256: apikey.Hash("k1")}, "", ""},
		{apikey.Entry{ID: "acme", Plan: "gold", SHA256: apikey.Hash("k2")}, "", ""}, // a second key, same plan
		{apikey.Entry{ID: "acme", Plan: "basic", SHA256: apikey.Hash("k3")}, "plan", "one caller, one plan"},
		{apikey.Entry{ID: "x", Plan: "silver", SHA256: apikey.Hash("k4")}, "plan", `"silver": no such plan (have basic, gold)`},
		{apikey.Entry{ID: "a b", Plan: "gold", SHA256: apikey.Hash("k5")}, "id", "only letters"},
		{apikey.Entry{ID: "y", Plan: "gold", SHA256: apikey.Hash("k1")}, "sha256", "given twice"},
	} {
		field, err := c.AddKey(tt.e)
		if field != tt.field || (err == nil) != (tt.in == "") || err != nil && !strings.Contains(err.Error(), tt.in) {
			t.Errorf("%+v: %q, %v; want %q, %q", tt.e, field, err, tt.field, tt.in)
		}
	}
	if k, ok := c.Model.Keys.Lookup("k2"); !ok || k != (apikey.Key{ID: "acme", Plan: "gold"}) || c.Model.Keys.Len() != 2 {
		t.Errorf("set: %v %v, %d keys", k, ok, c.Model.Keys.Len())
	}
}

// TestAddressLists: a list is read with its bad items, and a match's
// addresses resolve list names, addresses and CIDRs into one set.
func TestAddressLists(t *testing.T) {
	l := plans.AddressLists{}
	if bad, err := l.Add("office", []string{"192.0.2.0/24", "10.0.0.0/33", "2001:db8::1"}); err != nil || len(bad) != 1 || bad[0].Index != 1 {
		t.Fatalf("Add: %v, %v", bad, err)
	}
	if _, err := l.Add("no good", nil); err == nil {
		t.Error("a list named with a space: no error")
	}
	set, bad, err := l.Set([]string{"office", "198.51.100.7", "nosuch"}, "address_lists")
	if err != nil || len(bad) != 1 || bad[0].Index != 2 || bad[0].Err.Error() != `"nosuch": neither an address list (have office) nor an address or CIDR` {
		t.Fatalf("Set: %v, %v", bad, err)
	}
	for addr, want := range map[string]bool{"192.0.2.9": true, "2001:db8::1": true, "198.51.100.7": true, "198.51.100.8": false} {
		if got := set.Contains(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s in set = %v, want %v", addr, got, want)
		}
	}
}
