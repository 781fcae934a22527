package descriptor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/memstore"
)

func addrSet(t *testing.T, cidrs ...string) *clientip.AddrSet {
	t.Helper()
	pfx, err := clientip.ParsePrefixes(cidrs)
	if err != nil {
		t.Fatal(err)
	}
	s, err := clientip.NewAddrSet(pfx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAddressNodes matches by address: an exact value first, then the
// address and wildcard nodes in the order they were added, then the key
// alone; in both matchings. Duplicates are the same key and lists.
func TestAddressNodes(t *testing.T) {
	lim := func(name string) *descriptor.Limit {
		return limit(t, descriptor.LimitSpec{Name: name, Unit: descriptor.Second, RequestsPerUnit: 1})
	}
	d := descriptor.NewDomain("edge", "x.yaml")
	nodes := []*descriptor.Node{
		{Key: "remote_address", Value: "10.9.9.9", Limit: lim("exact")},
		{Key: "remote_address", Addresses: addrSet(t, "10.0.0.0/8", "2001:db8::/32"), NotAddresses: addrSet(t, "10.1.0.0/16"), AddressText: "[10.0.0.0/8,2001:db8::/32]![10.1.0.0/16]", Limit: lim("ten")},
		{Key: "remote_address", Value: "10.*", Limit: lim("wildcard")},
		{Key: "remote_address", NotAddresses: addrSet(t, "0.0.0.0/0"), AddressText: "![0.0.0.0/0]", Limit: lim("any-v6")},
		{Key: "remote_address", Limit: lim("key")},
	}
	for _, n := range nodes {
		if dup := d.AddEnvoyproxy(n); dup != nil {
			t.Fatalf("AddEnvoyproxy(%s) = duplicate %s", n.Composite(), dup.Composite())
		}
	}
	again := &descriptor.Node{Key: "remote_address", Addresses: addrSet(t, "10.0.0.0/8"), AddressText: nodes[1].AddressText}
	if d.Add(again) != nodes[1] || d.AddEnvoyproxy(again) != nodes[1] {
		t.Error("an address node with the same key and lists is not a duplicate")
	}
	if other := (&descriptor.Node{Key: "client", AddressText: nodes[1].AddressText, Addresses: nodes[1].Addresses}); d.Add(other) != nil {
		t.Error("an address node of another key is a duplicate")
	}
	if got := nodes[1].Composite(); got != "remote_address_[10.0.0.0/8,2001:db8::/32]![10.1.0.0/16]" {
		t.Errorf("Composite = %q", got)
	}
	for value, want := range map[string]string{
		"10.9.9.9":           "exact",
		"10.2.3.4":           "ten",
		"::ffff:10.2.3.4":    "ten",
		"2001:db8::1":        "ten",
		"10.1.0.1":           "wildcard",
		"10.x":               "wildcard",
		"2001:db9::1":        "any-v6",
		"192.0.2.1":          "key",
		"[2001:db8::1]:8080": "ten",
		"no address":         "key",
	} {
		for _, compat := range []bool{false, true} {
			es := entries("remote_address", value)
			m := d.Match(es)
			if compat {
				m = d.MatchEnvoyproxy(es)
			}
			if got := m.Limit.PolicyName(); got != want {
				t.Errorf("compat %v: Match(remote_address=%q) = %s, want %s", compat, value, got, want)
			}
		}
	}
}

// TestCalendarStatus decides a calendar quota per day in Madrid on the
// day of the spring change (23 hours): duration_until_reset is the time
// to the local midnight, a refusal waits for it, and the next day has the
// whole quota again.
func TestCalendarStatus(t *testing.T) {
	madrid, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		t.Fatal(err)
	}
	q := portero.PerDay(2).WithZone("Europe/Madrid")
	lim, err := descriptor.NewLimit(descriptor.LimitSpec{Name: "daily", Unit: descriptor.Day, RequestsPerUnit: 2, Calendar: q})
	if err != nil {
		t.Fatal(err)
	}
	if lim.Rule.Limit != q || lim.Rule.Algorithm != portero.FixedWindow || lim.Unit != descriptor.Day || lim.Rule.Announce.Policy != `"daily";q=2;w=86400` {
		t.Fatalf("calendar limit = %v %v per %s, %q", lim.Rule.Algorithm, lim.Rule.Limit, lim.Unit, lim.Rule.Announce.Policy)
	}
	dom := descriptor.NewDomain("edge", "x.yaml")
	dom.Add(&descriptor.Node{Key: "api_key", Limit: lim})
	cfg, _ := descriptor.NewConfig([]*descriptor.Domain{dom}, dom.Files)
	c := descriptor.NewCompiler(cfg, descriptor.Options{})
	st, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	e, err := engine.New(engine.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	req := &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{{Entries: entries("api_key", "k")}}}
	decide := func(now time.Time) descriptor.Status {
		t.Helper()
		p, v := new(descriptor.Plan), new(engine.Verdict)
		if err := c.Compile(req, now, p); err != nil {
			t.Fatal(err)
		}
		if err := e.Decide(context.Background(), now, p.Hits, v); err != nil {
			t.Fatal(err)
		}
		return p.Status(0, v, now)
	}
	now := time.Date(2026, 3, 29, 0, 30, 0, 0, madrid)
	left := 22*time.Hour + 30*time.Minute // 23-hour day
	for i := 1; i <= 2; i++ {
		if s := decide(now); s.Code != descriptor.OK || s.Remaining != int64(2-i) || s.ResetAfter != left {
			t.Fatalf("request %d: %v remaining %d reset %v; want OK, %d, %v", i, s.Code, s.Remaining, s.ResetAfter, 2-i, left)
		}
	}
	if s := decide(now); s.Code != descriptor.OverLimit || s.RetryAfter != left || s.ResetAfter != left {
		t.Fatalf("over the quota: %v retry %v reset %v; want OVER_LIMIT, both %v", s.Code, s.RetryAfter, s.ResetAfter, left)
	}
	last := time.Date(2026, 3, 30, 0, 0, 0, 0, madrid).Add(-time.Nanosecond)
	if s := decide(last); s.Code != descriptor.OverLimit || s.ResetAfter != time.Nanosecond {
		t.Fatalf("the last instant of the day: %v reset %v", s.Code, s.ResetAfter)
	}
	if s := decide(last.Add(time.Nanosecond)); s.Code != descriptor.OK || s.Remaining != 1 || s.ResetAfter != 24*time.Hour {
		t.Fatalf("the next day: %v remaining %d reset %v; want OK, 1, 24h", s.Code, s.Remaining, s.ResetAfter)
	}
}

func TestLimitSpecExtension(t *testing.T) {
	if _, err := descriptor.NewLimit(descriptor.LimitSpec{Name: "q", Unit: descriptor.Hour, RequestsPerUnit: 2, Calendar: portero.PerDay(2)}); err == nil || !strings.Contains(err.Error(), "is not 2 per hour") {
		t.Errorf("a calendar quota that is not its unit: %v", err)
	}
	if _, err := descriptor.NewLimit(descriptor.LimitSpec{Name: "q", Unit: descriptor.Day, RequestsPerUnit: 3, Calendar: portero.PerDay(2)}); err == nil {
		t.Error("a calendar quota whose count is not requests_per_unit: accepted")
	}
	lb := limit(t, descriptor.LimitSpec{Name: "waf", RequestsPerUnit: 2000, LookBack: 300 * time.Second, Algorithm: portero.SlidingLog})
	if lb.Unit != descriptor.UnitUnknown || lb.Rule.Limit != (portero.Limit{Count: 2000, Window: 300 * time.Second}) || lb.Rule.Announce.Policy != `"waf";q=2000;w=300` {
		t.Errorf("look-back limit: %s %v %q", lb.Unit, lb.Rule.Limit, lb.Rule.Announce.Policy)
	}
	if _, err := descriptor.NewLimit(descriptor.LimitSpec{Name: "x", RequestsPerUnit: 2}); err == nil {
		t.Error("no unit and no look-back: accepted")
	}
}
