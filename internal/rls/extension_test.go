package rls

import (
	"context"
	"math"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/redisstore"
)

// extensionConfig is Portero's extension at the Envoy door: a calendar
// quota per day in Madrid beside a rate, a look-back window, and address
// matching (testdata/extension.yaml's shape, with small numbers).
const extensionConfig = `domain: gw
portero:
  address_lists:
    monitoring: [203.0.113.0/24, "2001:db8:100::/48"]
    abusive: [198.51.100.0/24]
descriptors:
  - key: remote_address
    portero: {addresses: [monitoring]}
    rate_limit: {unlimited: true}
  - key: remote_address
    portero: {addresses: [abusive]}
    share_threshold: true
    rate_limit: {name: abusive, unit: minute, requests_per_unit: 3}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: waf
    rate_limit: {name: per-ip-1min, requests_per_unit: 10, portero: {look_back: 60s}}
  - key: api_key
    rate_limit:
      name: daily
      unit: day
      requests_per_unit: 3
      portero: {calendar: true, tz: Europe/Madrid}
  - key: user
    rate_limit: {name: rate, unit: second, requests_per_unit: 100}
`

// extensionStores are the stores the extension is decided on end to end:
// memory, and a real redis-server on the caller's clock (the injected one).
func extensionStores(t *testing.T) map[string]func(t *testing.T) portero.Store {
	srv := redistest.Start(t)
	return map[string]func(t *testing.T) portero.Store{
		"memory": func(t *testing.T) portero.Store { return newMemStore(t) },
		"redis": func(t *testing.T) portero.Store {
			if _, err := redistest.Do(srv.Addr(), "FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			st, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 10 * time.Second, Clock: redisstore.CallerClock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close(context.Background()) })
			return st
		},
	}
}

func startExtension(t *testing.T, transport string, st portero.Store, at time.Time) *env {
	t.Helper()
	c, err := envoyconf.Parse([]envoyconf.Source{{Name: "gw.yaml", Data: []byte(extensionConfig)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, setup{transport: transport, store: st, limits: c})
	e.clock.Add(at.Sub(e.clock.Now()))
	return e
}

// TestCalendarQuotaOverGRPC: a real grpc-go client asks a real server, on
// the memory store and on Redis, for a calendar quota of 3 per Madrid day
// beside a rate. The quota refuses with its own RateLimit item (its t the
// time to Madrid's midnight, its policy w the nominal day), its
// current_limit DAY and its duration_until_reset to midnight, while the
// rate's item stays a second's; across midnight it is whole again.
func TestCalendarQuotaOverGRPC(t *testing.T) {
	madrid, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		t.Fatal(err)
	}
	// 30 s before the end of the last Sunday of October 2026, a day of 25
	// hours in Madrid: a 24-hour window would end an hour earlier.
	before := time.Date(2026, 10, 25, 23, 59, 30, 0, madrid)
	for name, newStore := range extensionStores(t) {
		t.Run(name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, transport string) {
				e := startExtension(t, transport, newStore(t), before)
				key, user := desc("api_key", "k1"), desc("user", "u1")
				for i := 1; i <= 3; i++ {
					resp := e.call(t, "gw", 1, key, user)
					q := resp.Statuses[0]
					if resp.OverallCode != pb.RateLimitResponse_OK || q.LimitRemaining != uint32(3-i) {
						t.Fatalf("request %d: %v remaining %d", i, resp.OverallCode, q.LimitRemaining)
					}
					if q.CurrentLimit.GetName() != "daily" || q.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_DAY || q.CurrentLimit.GetRequestsPerUnit() != 3 {
						t.Fatalf("current_limit = %v", q.CurrentLimit)
					}
					if got := q.DurationUntilReset.AsDuration(); got != 30*time.Second {
						t.Fatalf("duration_until_reset = %v, want 30s (to Madrid's midnight)", got)
					}
				}
				resp := e.call(t, "gw", 1, key, user)
				if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != pb.RateLimitResponse_OK {
					t.Fatalf("4th request: %v, statuses %v", resp.OverallCode, resp.Statuses)
				}
				if got, want := header(resp, "RateLimit-Policy"), `"daily";q=3;w=86400, "rate";q=100;w=1`; got != want {
					t.Errorf("RateLimit-Policy = %q, want %q", got, want)
				}
				if got, want := header(resp, "RateLimit"), `"daily";r=0;t=30`; got != want {
					t.Errorf("RateLimit = %q, want %q (the quota that refused)", got, want)
				}
				if got := header(resp, "Retry-After"); got != "30" {
					t.Errorf("Retry-After = %q, want 30", got)
				}
				// All-or-nothing: the refused request spent no rate.
				if got := resp.Statuses[1].LimitRemaining; got != 97 {
					t.Errorf("rate remaining after the refusal = %d, want 97", got)
				}
				// One nanosecond before midnight: still refused.
				e.clock.Add(30*time.Second - time.Nanosecond)
				if resp := e.call(t, "gw", 1, key); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("last instant of the day: %v", resp.OverallCode)
				}
				// Midnight: a new day of 24 hours, the quota whole.
				e.clock.Add(time.Nanosecond)
				resp = e.call(t, "gw", 1, key)
				q := resp.Statuses[0]
				if resp.OverallCode != pb.RateLimitResponse_OK || q.LimitRemaining != 2 || q.DurationUntilReset.AsDuration() != 24*time.Hour {
					t.Fatalf("next day: %v remaining %d reset %v; want OK 2 24h", resp.OverallCode, q.LimitRemaining, q.DurationUntilReset.AsDuration())
				}
				if got, want := header(resp, "RateLimit"), `"daily";r=2;t=86400`; got != want {
					t.Errorf("next day RateLimit = %q, want %q", got, want)
				}
				// Another key has its own quota.
				if resp := e.call(t, "gw", 1, desc("api_key", "k2")); resp.Statuses[0].LimitRemaining != 2 {
					t.Errorf("k2 remaining = %d, want 2", resp.Statuses[0].LimitRemaining)
				}
			})
		})
	}
}

// TestAddressMatchOverGRPC: remote_address values matched by CIDR over a
// real gRPC call, on both stores: the monitoring range (v4 and v6) has no
// limit, an abusive range shares one low limit for all its addresses, and
// everyone else keeps the per-address rate.
func TestAddressMatchOverGRPC(t *testing.T) {
	for name, newStore := range extensionStores(t) {
		t.Run(name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, transport string) {
				e := startExtension(t, transport, newStore(t), t0)
				for _, ip := range []string{"203.0.113.7", "2001:db8:100::42", "::ffff:203.0.113.8"} {
					for range 5 {
						resp := e.call(t, "gw", 1, desc("remote_address", ip))
						if st := resp.Statuses[0]; resp.OverallCode != pb.RateLimitResponse_OK || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
							t.Fatalf("monitoring %s: %v remaining %d limit %v, want OK unlimited", ip, resp.OverallCode, st.LimitRemaining, st.CurrentLimit)
						}
					}
				}
				// Three addresses of the range spend its one counter.
				for i, ip := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
					resp := e.call(t, "gw", 1, desc("remote_address", ip))
					st := resp.Statuses[0]
					if resp.OverallCode != pb.RateLimitResponse_OK || st.LimitRemaining != uint32(2-i) || st.CurrentLimit.GetName() != "abusive" {
						t.Fatalf("abusive %s: %v remaining %d limit %v", ip, resp.OverallCode, st.LimitRemaining, st.CurrentLimit)
					}
				}
				resp := e.call(t, "gw", 1, desc("remote_address", "198.51.100.200"))
				if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("a fourth address of the abusive range: %v, want OVER_LIMIT", resp.OverallCode)
				}
				if got, want := header(resp, "RateLimit"), `"abusive";r=0;t=60`; got != want {
					t.Errorf("RateLimit = %q, want %q", got, want)
				}
				// Just outside the range: the ordinary per-address limit.
				resp = e.call(t, "gw", 1, desc("remote_address", "198.51.101.1"))
				if st := resp.Statuses[0]; resp.OverallCode != pb.RateLimitResponse_OK || st.CurrentLimit.GetName() != "gw.remote_address" || st.LimitRemaining != 99 {
					t.Fatalf("outside the range: %v %v remaining %d", resp.OverallCode, st.CurrentLimit, st.LimitRemaining)
				}
			})
		})
	}
}

// TestLookBackOverGRPC: a look-back window of 60 s with a limit of 10,
// exact over a real gRPC call on both stores: 10 requests spread over the
// minute pass, the 11th is refused until the first leaves the window, and
// not one nanosecond earlier.
func TestLookBackOverGRPC(t *testing.T) {
	for name, newStore := range extensionStores(t) {
		t.Run(name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, transport string) { lookBack(t, startExtension(t, transport, newStore(t), t0)) })
		})
	}
}

func lookBack(t *testing.T, e *env) {
	t.Helper()
	ip := desc("waf", "192.0.2.1")
	for i := range 10 {
		resp := e.call(t, "gw", 1, ip)
		if st := resp.Statuses[0]; resp.OverallCode != pb.RateLimitResponse_OK || st.LimitRemaining != uint32(9-i) {
			t.Fatalf("request %d: %v remaining %d", i+1, resp.OverallCode, st.LimitRemaining)
		}
		if i == 0 {
			if st := resp.Statuses[0]; st.CurrentLimit.GetName() != "per-ip-1min" || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_UNKNOWN || st.CurrentLimit.GetRequestsPerUnit() != 10 {
				t.Fatalf("current_limit = %v", st.CurrentLimit)
			}
			if got, want := header(resp, "RateLimit-Policy"), `"per-ip-1min";q=10;w=60`; got != want {
				t.Errorf("RateLimit-Policy = %q, want %q", got, want)
			}
		}
		e.clock.Add(5 * time.Second)
	}
	// t0+50s: the window [t0-10s, t0+50s] holds 10.
	resp := e.call(t, "gw", 1, ip)
	if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("11th request: %v", resp.OverallCode)
	}
	if got := header(resp, "Retry-After"); got != "10" {
		t.Errorf("Retry-After = %q, want 10 (the first request leaves the window at t0+60s)", got)
	}
	e.clock.Add(10*time.Second - time.Nanosecond)
	if resp := e.call(t, "gw", 1, ip); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a nanosecond before the first leaves: %v", resp.OverallCode)
	}
	e.clock.Add(time.Nanosecond)
	if resp := e.call(t, "gw", 1, ip); resp.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("once the first left the window: %v", resp.OverallCode)
	}
}

// TestExtensionCompatOverGRPC runs the extension under the compatibility
// mode (envoyproxy/ratelimit's reading, matching and CountEach counting,
// its answers), on both stores over a real gRPC call: the calendar quota
// refuses past its count and comes back at Madrid's midnight, with
// envoyproxy/ratelimit's whole-second duration_until_reset; an address
// range shares its counter under envoyproxy/ratelimit's key; the
// monitoring range is unlimited.
func TestExtensionCompatOverGRPC(t *testing.T) {
	madrid, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Date(2026, 10, 25, 23, 59, 30, 0, madrid)
	for name, newStore := range extensionStores(t) {
		t.Run(name, func(t *testing.T) {
			c, err := envoyconf.Parse([]envoyconf.Source{{Name: "gw.yaml", Data: []byte(extensionConfig)}}, envoyconf.Options{Envoyproxy: true})
			if err != nil {
				t.Fatal(err)
			}
			eng, err := engine.New(engine.Options{Store: newStore(t), Counting: engine.CountEach, OnError: portero.FailError})
			if err != nil {
				t.Fatal(err)
			}
			clk := &clock{now: before}
			// With envoyproxy/ratelimit's three headers (its
			// LIMIT_RESPONSE_HEADERS_ENABLED), whose reset it computes from
			// the unit: the extension's limits have none of its units' epoch
			// windows, so theirs is the time to the period's end, or until
			// the look-back window is whole.
			svc := NewService(descriptor.NewCompiler(c, descriptor.Options{Envoyproxy: true}), eng, ServiceOptions{Compat: &Compat{Headers: HeadersEnvoyproxy}, Now: clk.Now})
			conn := serveSvc(t, svc, ServerOptions{}, nil, "")
			e := &env{client: pb.NewRateLimitServiceClient(conn), conn: conn, clock: clk}
			key := desc("api_key", "k1")
			for i := 1; i <= 3; i++ {
				resp := e.call(t, "gw", 1, key)
				if q := resp.Statuses[0]; resp.OverallCode != pb.RateLimitResponse_OK || q.LimitRemaining != uint32(3-i) || q.DurationUntilReset.AsDuration() != 30*time.Second || q.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_DAY {
					t.Fatalf("request %d: %v remaining %d reset %v limit %v", i, resp.OverallCode, q.LimitRemaining, q.DurationUntilReset.AsDuration(), q.CurrentLimit)
				}
			}
			resp := e.call(t, "gw", 1, key)
			if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("4th request: %v", resp.OverallCode)
			}
			if got := header(resp, "RateLimit-Reset"); got != "30" || header(resp, "RateLimit-Limit") != "3" {
				t.Errorf("quota: RateLimit-Limit %q, RateLimit-Reset %q; want 3 and 30 (to Madrid's midnight)", header(resp, "RateLimit-Limit"), got)
			}
			// A look-back window: the reset is when it is whole again.
			if resp := e.call(t, "gw", 1, desc("waf", "192.0.2.1")); resp.OverallCode != pb.RateLimitResponse_OK || header(resp, "RateLimit-Reset") != "60" || header(resp, "RateLimit-Remaining") != "9" {
				t.Errorf("look-back: %v, RateLimit-Remaining %q, RateLimit-Reset %q; want OK, 9, 60", resp.OverallCode, header(resp, "RateLimit-Remaining"), header(resp, "RateLimit-Reset"))
			}
			clk.Add(30 * time.Second)
			if resp := e.call(t, "gw", 1, key); resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
				t.Fatalf("next day: %v remaining %d", resp.OverallCode, resp.Statuses[0].LimitRemaining)
			}
			for i, ip := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4"} {
				resp := e.call(t, "gw", 1, desc("remote_address", ip))
				if want := i < 3; (resp.OverallCode == pb.RateLimitResponse_OK) != want {
					t.Fatalf("abusive %s: %v, want OK %v", ip, resp.OverallCode, want)
				}
			}
			resp = e.call(t, "gw", 1, desc("remote_address", "2001:db8:100::1"))
			if st := resp.Statuses[0]; resp.OverallCode != pb.RateLimitResponse_OK || st.LimitRemaining != math.MaxUint32 {
				t.Fatalf("monitoring: %v remaining %d", resp.OverallCode, st.LimitRemaining)
			}
		})
	}
}

// TestCalendarQuotaServerClock: on Redis with its own clock (the default of
// portero rls --store redis), a calendar quota at the Envoy door counts in
// the period Redis's clock falls in. The zone is one whose local midnight
// is hours away, so that the real clock cannot cross it during the test.
func TestCalendarQuotaServerClock(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	now := time.Now()
	zone := ""
	for _, z := range []string{"UTC", "Asia/Tokyo", "America/New_York", "Europe/Madrid"} {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Fatal(err)
		}
		if h := now.In(loc).Hour(); h >= 2 && h < 22 {
			zone = z
			break
		}
	}
	if zone == "" {
		t.Fatal("no zone far from its midnight")
	}
	cfg := "domain: gw\ndescriptors:\n  - key: api_key\n    rate_limit: {name: daily, unit: day, requests_per_unit: 3, portero: {calendar: true, tz: " + zone + "}}\n"
	c, err := envoyconf.Parse([]envoyconf.Source{{Name: "gw.yaml", Data: []byte(cfg)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, setup{store: st, limits: c, transport: "grpc-go"})
	e.clock.Add(now.Sub(e.clock.Now()))
	_, end := portero.PerDay(3).WithZone(zone).PeriodAt(now)
	for i := 1; i <= 4; i++ {
		resp := e.call(t, "gw", 1, desc("api_key", "k"))
		if want := i <= 3; (resp.OverallCode == pb.RateLimitResponse_OK) != want {
			t.Fatalf("request %d in %s: %v", i, zone, resp.OverallCode)
		}
		if got := resp.Statuses[0].DurationUntilReset.AsDuration(); got != end.Sub(now) {
			t.Fatalf("request %d: duration_until_reset %v, want %v (to midnight in %s)", i, got, end.Sub(now), zone)
		}
	}
}
