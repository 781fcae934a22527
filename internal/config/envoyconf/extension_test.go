package envoyconf

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
)

func loadExtension(t *testing.T, compat bool) *descriptor.Domain {
	t.Helper()
	c, err := Load("testdata/extension.yaml", Options{Envoyproxy: compat})
	if err != nil {
		t.Fatal(err)
	}
	return c.Domain("gateway")
}

// TestExtensionRules reads testdata/extension.yaml in both modes: a
// calendar quota and a look-back window compile into the rules the gateway
// compiles for a plan's quota and a rate rule, told to Envoy as written.
func TestExtensionRules(t *testing.T) {
	for _, compat := range []bool{false, true} {
		d := loadExtension(t, compat)
		for _, tt := range []struct {
			entries []descriptor.Entry
			alg     portero.Algorithm
			limit   portero.Limit
			unit    descriptor.Unit
			rpu     uint32
			policy  string
		}{
			{entries("plan", "gold", "api_key", "k"), portero.FixedWindow, portero.PerDay(500000).WithZone("Europe/Madrid").WithOffset(6 * time.Hour), descriptor.Day, 500000, `"gold-daily";q=500000;w=86400`},
			{entries("plan", "basic", "api_key", "k"), portero.FixedWindow, portero.PerMonth(100000), descriptor.Month, 100000, `"basic-monthly";q=100000;w=2592000`},
			{entries("client", "192.0.2.1"), portero.SlidingLog, portero.Limit{Count: 2000, Window: 300 * time.Second}, descriptor.UnitUnknown, 2000, `"per-ip-5min";q=2000;w=300`},
		} {
			m := d.Match(tt.entries)
			if compat {
				m = d.MatchEnvoyproxy(tt.entries)
			}
			l := m.Limit
			if l == nil {
				t.Fatalf("compat %v: %v matches no limit", compat, tt.entries)
			}
			if l.Rule.Algorithm != tt.alg || l.Rule.Limit != tt.limit || l.Unit != tt.unit || l.RequestsPerUnit != tt.rpu || l.Rule.Announce.Policy != tt.policy {
				t.Errorf("compat %v: %v = %s %v (%d per %s) announced %s; want %s %v (%d per %s) announced %s", compat, tt.entries,
					l.Rule.Algorithm, l.Rule.Limit, l.RequestsPerUnit, l.Unit, l.Rule.Announce.Policy, tt.alg, tt.limit, tt.rpu, tt.unit, tt.policy)
			}
		}
	}
}

// TestAddressMatching matches remote_address values against address
// nodes, in both modes: a list, CIDRs v4 and v6, a single address, an
// IPv4-mapped IPv6 address, a negated subnet, a value that is no address;
// an exact value still comes first, and the key-only node last.
func TestAddressMatching(t *testing.T) {
	for _, compat := range []bool{false, true} {
		d := loadExtension(t, compat)
		for value, want := range map[string]string{
			"203.0.113.9":          "unlimited",
			"2001:db8:100::1":      "unlimited",
			"2001:db8:100:ffff::9": "unlimited",
			"::ffff:203.0.113.9":   "unlimited",
			"198.51.100.77":        "abusive",
			"192.0.2.7":            "abusive",
			"192.0.2.8":            "gateway.remote_address",
			"10.2.3.4":             "internal",
			"10.1.2.3":             "gateway.remote_address",
			"2001:db8:101::1":      "gateway.remote_address",
			"not-an-address":       "gateway.remote_address",
			"":                     "gateway.remote_address",
		} {
			es := entries("remote_address", value)
			m := d.Match(es)
			if compat {
				m = d.MatchEnvoyproxy(es)
			}
			got := "no match"
			switch {
			case m.Limit == nil:
			case m.Limit.Unlimited:
				got = "unlimited"
			default:
				got = m.Limit.PolicyName()
			}
			if got != want {
				t.Errorf("compat %v: remote_address %q matches %s, want %s", compat, value, got, want)
			}
		}
		// A negated list alone: the monitoring range has no look-back limit.
		for value, want := range map[string]bool{"203.0.113.1": false, "2001:db8:100::7": false, "192.0.2.1": true, "x": false} {
			es := entries("client", value)
			m := d.Match(es)
			if compat {
				m = d.MatchEnvoyproxy(es)
			}
			if got := m.Limit != nil; got != want {
				t.Errorf("compat %v: client %q limited = %v, want %v", compat, value, got, want)
			}
		}
		// share_threshold on an address node: the range shares one counter.
		a, b := entries("remote_address", "198.51.100.1"), entries("remote_address", "192.0.2.7")
		ma, mb := d.Match(a), d.Match(b)
		if ka, kb := descriptor.StoreKey("gateway", a, ma), descriptor.StoreKey("gateway", b, mb); ka != kb {
			t.Errorf("compat %v: the shared range counts under %q and %q, want one key", compat, ka, kb)
		}
		ma, mb = d.MatchEnvoyproxy(a), d.MatchEnvoyproxy(b)
		if ka, kb := descriptor.EnvoyproxyKey("", "gateway", a, ma), descriptor.EnvoyproxyKey("", "gateway", b, mb); ka != kb || ka != "gateway_remote_address_[abusive,192.0.2.7]_" {
			t.Errorf("compat %v: envoyproxy keys %q and %q, want both gateway_remote_address_[abusive,192.0.2.7]_", compat, ka, kb)
		}
		// Per address otherwise.
		c1, c2 := entries("remote_address", "10.2.0.1"), entries("remote_address", "10.2.0.2")
		if k1, k2 := descriptor.StoreKey("gateway", c1, d.Match(c1)), descriptor.StoreKey("gateway", c2, d.Match(c2)); k1 == k2 {
			t.Errorf("compat %v: two internal addresses share key %q", compat, k1)
		}
	}
}

// TestExtensionErrors puts every mistake of the extension in one file and
// expects them all at once, each with file, line, column and field, the
// same in both modes (envoyproxy/ratelimit refuses the key portero, so its
// contents are Portero's to check).
func TestExtensionErrors(t *testing.T) {
	const file = `domain: d
portero:
  address_lists:
    bad: [10.0.0.0/33]
    "no good": [10.0.0.0/8]
  frobs: 1
descriptors:
  - key: a
    portero: {addresses: [nosuch]}
  - key: b
    value: x
    portero: {addresses: [10.0.0.0/8]}
  - key: c
    portero: {adresses: [10.0.0.0/8]}
  - key: d
    portero: {addresses: []}
  - key: e
    rate_limit: {unit: hour, requests_per_unit: 5, portero: {calendar: true}}
  - key: f
    rate_limit: {unit: day, requests_per_unit: 5, portero: {calendar: true, tz: Nowhere/Else}}
  - key: g
    rate_limit: {unit: day, requests_per_unit: 5, portero: {calendar: true, offset: 25h}}
  - key: h
    rate_limit: {unit: day, requests_per_unit: 5, portero: {tz: UTC}}
  - key: i
    rate_limit: {unit: day, requests_per_unit: 5, portero: {calendar: true, algorithm: sliding-log}}
  - key: j
    rate_limit: {requests_per_unit: 5, portero: {look_back: 300s}}
  - key: k
    rate_limit: {requests_per_unit: 50, portero: {look_back: 90s}}
  - key: l
    rate_limit: {unit: second, requests_per_unit: 50, portero: {look_back: 60s}}
  - key: m
    rate_limit: {unit: day, requests_per_unit: 50, portero: {calendar: true, look_back: 60s}}
  - key: n
    rate_limit: {unit: day, requests_per_unit: 0, portero: {calendar: true}}
  - key: o
    rate_limit: {unit: year, requests_per_unit: 5, portero: {calendar: true}}
  - key: p
    rate_limit: {unit: day, requests_per_unit: 5, portero: {calendar: true, tz: "Europe/Madrid offset 1h"}}
  - key: q
    rate_limit: {unit: day, requests_per_unit: 5, portero: {calendr: true}}
`
	want := []string{
		`x.yaml:4:11: portero.address_lists.bad[0]: "10.0.0.0/33": want a CIDR such as 10.0.0.0/8 or an address`,
		`x.yaml:5:5: portero.address_lists.no good: name "no good": only letters, digits`,
		`x.yaml:6:3: portero.frobs: unknown field (Portero's extension has address_lists)`,
		`x.yaml:9:27: descriptors[0].portero.addresses[0]: "nosuch": neither an address list (have bad) nor an address or CIDR`,
		`x.yaml:12:14: descriptors[1].portero: a descriptor matches a value or addresses, not both (value "x")`,
		`x.yaml:14:15: descriptors[2].portero.adresses: unknown field (Portero's extension has addresses and not_addresses)`,
		`x.yaml:16:26: descriptors[3].portero.addresses: want at least one address list, address or CIDR`,
		`x.yaml:18:24: descriptors[4].rate_limit.unit: hour: a calendar quota is per day, week or month (calendar: true)`,
		`x.yaml:20:81: descriptors[5].rate_limit.portero.tz: zone "Nowhere/Else": unknown time zone Nowhere/Else`,
		`x.yaml:22:85: descriptors[6].rate_limit.portero.offset: offset 1d1h: want at least 0 and less than 1d for a day`,
		`x.yaml:24:65: descriptors[7].rate_limit.portero.tz: tz is for a calendar quota: add calendar: true (with unit day, week or month)`,
		`x.yaml:26:71: descriptors[8].rate_limit.portero.calendar: a calendar quota is counted by fixed-window on the calendar, not sliding-log`,
		`x.yaml:28:37: descriptors[9].rate_limit.requests_per_unit: 5: at least 10 requests per window (look_back)`,
		`x.yaml:30:62: descriptors[10].rate_limit.portero.look_back: "90s": want 60s, 120s, 300s (the default) or 600s`,
		`x.yaml:32:24: descriptors[11].rate_limit.unit: look_back is the window: leave unit out`,
		`x.yaml:34:89: descriptors[12].rate_limit.portero.look_back: a limit is a calendar quota (calendar: true) or a look-back window, not both`,
		`x.yaml:36:48: descriptors[13].rate_limit.requests_per_unit: a calendar quota needs a positive requests_per_unit`,
		`x.yaml:38:24: descriptors[14].rate_limit.unit: year: a calendar quota is per day, week or month (calendar: true)`,
		`x.yaml:40:81: descriptors[15].rate_limit.portero.tz: "Europe/Madrid offset 1h": want one word, such as Europe/Madrid`,
		`x.yaml:42:61: descriptors[16].rate_limit.portero.calendr: unknown field (Portero's extension has algorithm, burst, calendar, tz, offset, look_back and budget)`,
	}
	for _, compat := range []bool{false, true} {
		_, err := Parse([]Source{{Name: "x.yaml", Data: []byte(file)}}, Options{Envoyproxy: compat})
		if err == nil {
			t.Fatalf("compat %v: accepted", compat)
		}
		var ce *Error
		if !errors.As(err, &ce) {
			t.Fatalf("compat %v: error %T is not an *Error", compat, err)
		}
		got := strings.Split(err.Error(), "\n")
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || strings.HasPrefix(g, w)
			}
			if !found {
				t.Errorf("compat %v: errors lack %q", compat, w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("compat %v: %d errors, want %d", compat, len(got), len(want))
		}
		if t.Failed() {
			t.Logf("got:\n%s", err)
		}
	}
}

// TestExtensionLeavesCompatAlone: in compatibility mode a key-only node
// beside address nodes keeps its envoyproxy/ratelimit name and matching,
// and an entry whose value is the text of an address node's name matches
// no address node (address nodes are not in the composite index).
func TestExtensionLeavesCompatAlone(t *testing.T) {
	d := loadExtension(t, true)
	for _, value := range []string{"[monitoring]", "[abusive,192.0.2.7]", "[10.0.0.0/8]![10.1.0.0/16]"} {
		if m := d.MatchEnvoyproxy(entries("remote_address", value)); m.Limit == nil || m.Limit.PolicyName() != "gateway.remote_address" {
			t.Errorf("remote_address %q matched %+v, want the key-only node", value, m.Limit)
		}
	}
}

// TestDuplicateAddressNodes: two descriptors with one key and the same
// lists are duplicates in both modes, at the top level and below.
func TestDuplicateAddressNodes(t *testing.T) {
	const file = `domain: d
descriptors:
  - {key: k, portero: {addresses: [10.0.0.0/8]}}
  - {key: k, portero: {addresses: [10.0.0.0/8]}}
  - {key: k}
  - key: p
    descriptors:
      - {key: k, portero: {not_addresses: ["::1"]}}
      - {key: k, portero: {not_addresses: ["::1"]}}
`
	for _, compat := range []bool{false, true} {
		_, err := Parse([]Source{{Name: "x.yaml", Data: []byte(file)}}, Options{Envoyproxy: compat})
		for _, want := range []string{
			`x.yaml:4:5: descriptors[1]: duplicate descriptor "k_[10.0.0.0/8]" at this level (first at line 3)`,
			`x.yaml:9:9: descriptors[3].descriptors[1]: duplicate descriptor "k_![::1]" at this level (first at line 8)`,
		} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("compat %v: %v, want %q", compat, err, want)
			}
		}
		if err != nil && strings.Count(err.Error(), "\n") != 1 {
			t.Errorf("compat %v: %v, want exactly two errors", compat, err)
		}
	}
}

// TestPlanAsDescriptors parses docs/envoy.md's usage plan written as
// descriptors (API keys identified in Envoy, the id sent as a value): the
// throttle and the calendar quota per client id.
func TestPlanAsDescriptors(t *testing.T) {
	const file = `domain: api
descriptors:
- key: plan
  value: gold
  descriptors:
    - key: client_id
      rate_limit: {name: gold, unit: second, requests_per_unit: 300}
    - key: client_quota
      rate_limit: {name: gold-quota, unit: day, requests_per_unit: 500000, portero: {calendar: true}}
`
	c, err := Parse([]Source{{Name: "api.yaml", Data: []byte(file)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("api")
	if l := d.Match(entries("plan", "gold", "client_id", "c1")).Limit; l == nil || l.Rule.Limit != portero.PerSecond(300) {
		t.Errorf("throttle = %+v", l)
	}
	if l := d.Match(entries("plan", "gold", "client_quota", "c1")).Limit; l == nil || l.Rule.Limit != portero.PerDay(500000) {
		t.Errorf("quota = %+v", l)
	}
}
