package policy_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

func TestAddrSet(t *testing.T) {
	set, err := clientip.NewAddrSet([]netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("10.1.0.0/16"), // inside the first: merged
		netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("::ffff:198.51.100.0/120"), // IPv4-mapped: 198.51.100.0/24
		netip.MustParsePrefix("2001:db8::/32"),
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr string
		want bool
	}{
		{"10.0.0.1", true}, {"10.255.255.255", true}, {"11.0.0.0", false}, {"9.255.255.255", false},
		{"192.0.2.7", true}, {"192.0.2.8", false},
		{"198.51.100.200", true}, {"::ffff:198.51.100.1", true}, {"::ffff:10.2.3.4", true},
		{"2001:db8::1", true}, {"2001:db9::1", false}, {"::a00:1", false}, // ::10.0.0.1 is not IPv4-mapped
	}
	for _, tt := range tests {
		if got := set.Contains(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("Contains(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	if set.Contains(netip.Addr{}) {
		t.Error("the zero address is in the set")
	}
	if set.Len() != 5 {
		t.Errorf("Len = %d, want 5", set.Len())
	}
}

func TestAddressMatch(t *testing.T) {
	mon, _ := clientip.NewAddrSet([]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")})
	bad, _ := clientip.NewAddrSet([]netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:bad::/48")})
	p := mustPolicy(t,
		policy.Rule{Name: "per-ip", Key: policy.MustParseKey("ip"), Limit: portero.PerMinute(100), Match: policy.Match{NotAddresses: mon}},
		policy.Rule{Name: "abusive", Key: policy.MustParseKey("ip"), Limit: portero.PerMinute(1), Match: policy.Match{Addresses: bad}},
	)
	tests := []struct {
		ip, want string
	}{
		{"192.0.2.1", "per-ip"},
		{"203.0.113.9", ""},                // monitoring: exempt
		{"198.51.100.4", "per-ip abusive"}, // its own low limit, stacked
		{"::ffff:198.51.100.4", "per-ip abusive"},
		{"2001:db8:bad::1", "per-ip abusive"},
		{"2001:db8:900d::1", "per-ip"},
	}
	for _, tt := range tests {
		hits, _, err := p.Compile(req("GET", "/", tt.ip), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for i, h := range hits {
			if i > 0 {
				got += " "
			}
			got += h.Rule.Name
		}
		if got != tt.want {
			t.Errorf("rules for %s = %q, want %q", tt.ip, got, tt.want)
		}
	}
}

func TestNewKeyParts(t *testing.T) {
	p := mustPolicy(t, policy.Rule{Name: "r", Key: policy.MustParseKey("path+query:user+cookie:session+forwarded-ip"), Limit: portero.PerMinute(10)})
	r := req("GET", "/a//b/../c", "192.0.2.1")
	r.RawQuery = "x=1&us%65r=alice%20b&user=bob"
	r.Header["Cookie"] = []string{"a=1; session=s3cr3t"}
	if hits, _, _ := p.Compile(r, nil, nil); len(hits) != 0 {
		t.Errorf("a connection address counted under forwarded-ip: %v", hits)
	}
	r.Forwarded = true
	hits, _, err := p.Compile(r, nil, nil)
	if err != nil || len(hits) != 1 {
		t.Fatalf("Compile = %v, %v", hits, err)
	}
	if want := "path=/a/c+query:user=alice b+cookie:session=s3cr3t+forwarded-ip=192.0.2.1/32"; hits[0].Key != want {
		t.Errorf("key = %q, want %q", hits[0].Key, want)
	}
	delete(r.Header, "Cookie")
	if hits, _, _ := p.Compile(r, nil, nil); len(hits) != 0 {
		t.Errorf("a request without the cookie was counted (a missing key part means the rule does not apply): %v", hits)
	}
	for _, bad := range []string{"query", "query:", "cookie:a;b", "path:x", "forwarded-ip:x"} {
		if _, err := policy.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) succeeded", bad)
		}
	}
}

func TestMayOverlap(t *testing.T) {
	tests := []struct {
		a, b policy.Match
		want bool
	}{
		{policy.Match{}, policy.Match{Path: "/orders"}, true},
		{policy.Match{Path: "/orders"}, policy.Match{Path: "/pets/**"}, false},
		{policy.Match{Path: "/api/**"}, policy.Match{Path: "/api/orders/{id}"}, true},
		{policy.Match{Path: "/api/*"}, policy.Match{Path: "/api/a/b"}, false},
		{policy.Match{Methods: []string{"POST"}, Path: "/orders"}, policy.Match{Methods: []string{"GET"}, Path: "/orders"}, false},
		{policy.Match{Methods: []string{"POST"}}, policy.Match{Methods: []string{"GET", "POST"}}, true},
		{policy.Match{Host: "api.example.com"}, policy.Match{Host: "*.example.com"}, true},
		{policy.Match{Host: "api.example.com"}, policy.Match{Host: "staging.example.com"}, false},
		{policy.Match{Host: "*.a.example.com"}, policy.Match{Host: "*.example.com"}, true},
	}
	for _, tt := range tests {
		if err := tt.a.Compile(); err != nil {
			t.Fatal(err)
		}
		if err := tt.b.Compile(); err != nil {
			t.Fatal(err)
		}
		if got := tt.a.MayOverlap(&tt.b); got != tt.want {
			t.Errorf("MayOverlap(%s, %s) = %v, want %v", tt.a.String(), tt.b.String(), got, tt.want)
		}
		if got := tt.b.MayOverlap(&tt.a); got != tt.want {
			t.Errorf("MayOverlap(%s, %s) = %v, want %v", tt.b.String(), tt.a.String(), got, tt.want)
		}
	}
}

// TestSettleRules drives both kinds of rule settled after the response
// through Compile, the engine, Pending and Settle on the memory store.
func TestSettleRules(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close(ctx) })
	e, err := engine.New(engine.Options{Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	failed, _ := policy.ParseStatuses([]string{"401", "403"})
	tokens, _ := policy.ParseCost("response-header:X-Tokens-Used")
	p := mustPolicy(t,
		policy.Rule{Name: "login-failures", Match: policy.Match{Methods: []string{"POST"}, Path: "/login"}, Key: policy.MustParseKey("ip"),
			Algorithm: portero.SlidingLog, Limit: portero.PerMinute(3), Responses: failed},
		policy.Rule{Name: "tokens", Match: policy.Match{Path: "/v1/chat"}, Key: policy.MustParseKey("header:X-API-Key"),
			Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1000), Cost: tokens, Reserve: 200},
	)
	if !p.Settles() {
		t.Fatal("Settles = false")
	}
	// serve decides r at now, then settles resp: what a door does.
	serve := func(r *policy.Request, now time.Time, resp *policy.Response) *engine.Verdict {
		t.Helper()
		hits, _, err := p.Compile(r, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		v := new(engine.Verdict)
		if err := e.Decide(ctx, now, hits, v); err != nil {
			t.Fatal(err)
		}
		pend := p.Pending(v, now, nil)
		if !v.Allowed {
			if len(pend) != 0 {
				t.Errorf("a refused request waits for a response: %v", pend)
			}
			return v
		}
		adj, err := p.Settle(pend, r, resp, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Settle(ctx, now.Add(time.Millisecond), adj); err != nil {
			t.Fatal(err)
		}
		return v
	}
	login := func() *policy.Request { return req("POST", "/login", "192.0.2.1") }
	ok := &policy.Response{Status: 200}
	denied := &policy.Response{Status: 401}
	// Good logins are never counted.
	for i := range 10 {
		if v := serve(login(), t0.Add(time.Duration(i)*time.Second), ok); !v.Allowed {
			t.Fatalf("good login %d refused", i)
		}
	}
	// Three failures are admitted, the fourth attempt is refused.
	for i := range 3 {
		if v := serve(login(), t0.Add(time.Duration(10+i)*time.Second), denied); !v.Allowed {
			t.Fatalf("failed login %d refused", i)
		}
	}
	if v := serve(login(), t0.Add(13*time.Second), ok); v.Allowed {
		t.Error("a 4th login after 3 failures in a minute was admitted")
	}
	if v := serve(login(), t0.Add(71*time.Second), ok); !v.Allowed { // the first failure, charged at 10.001 s, has expired
		t.Error("the failures did not expire after a minute")
	}

	// Tokens: 200 reserved, 50 used → 950 left; then 1,200 used → refused.
	chat := func() *policy.Request {
		r := req("POST", "/v1/chat", "192.0.2.1")
		r.Header["X-Api-Key"] = []string{"k1"}
		return r
	}
	left := func(at time.Time) int64 {
		d, err := mem.Peek(ctx, p.Rule("tokens").StoreRule(), "header:X-Api-Key=k1", at, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	serve(chat(), t0, &policy.Response{Status: 200, Header: map[string][]string{"X-Tokens-Used": {"50"}}})
	if got := left(t0); got != 950 {
		t.Errorf("after 50 tokens: %d left, want 950", got)
	}
	serve(chat(), t0.Add(time.Second), &policy.Response{Status: 200}) // reports nothing: the 200 reserved stand
	if got := left(t0.Add(time.Second)); got != 750 {
		t.Errorf("after an unreported response: %d left, want 750", got)
	}
	serve(chat(), t0.Add(2*time.Second), &policy.Response{Status: 200, Header: map[string][]string{"X-Tokens-Used": {"1200"}}})
	if v := serve(chat(), t0.Add(3*time.Second), ok); v.Allowed {
		t.Error("a request was admitted with the token budget overspent")
	}
	// A malformed report is an error naming the rule and leaves the reservation.
	_, err = p.Settle([]policy.Settlement{}, chat(), ok, nil)
	if err != nil {
		t.Error(err)
	}
	v := new(engine.Verdict)
	hits, _, _ := p.Compile(chat(), nil, nil)
	_ = e.Decide(ctx, t0.Add(time.Hour), hits, v)
	_, err = p.Settle(p.Pending(v, t0.Add(time.Hour), nil), chat(), &policy.Response{Status: 200, Header: map[string][]string{"X-Tokens-Used": {"many"}}}, nil)
	var re *policy.RuleError
	if !errors.As(err, &re) || re.Rule != "tokens" || !errors.Is(err, policy.ErrBadCost) {
		t.Errorf("a malformed X-Tokens-Used = %v, want a RuleError for tokens wrapping ErrBadCost", err)
	}
}

func TestSettleValidation(t *testing.T) {
	tokens, _ := policy.ParseCost("response-bytes")
	fail, _ := policy.ParseStatuses([]string{"5xx"})
	tests := []struct {
		name string
		r    policy.Rule
	}{
		{"queue counting responses", policy.Rule{Algorithm: portero.LeakyQueue, Limit: portero.PerSecond(10), Responses: fail}},
		{"sliding log refunding", policy.Rule{Algorithm: portero.SlidingLog, Limit: portero.PerSecond(10), Cost: tokens}},
		{"reserve above the limit", policy.Rule{Algorithm: portero.FixedWindow, Limit: portero.PerSecond(10), Cost: tokens, Reserve: 11}},
		{"reserve without a response cost", policy.Rule{Algorithm: portero.FixedWindow, Limit: portero.PerSecond(10), Reserve: 5}},
	}
	for _, tt := range tests {
		tt.r.Name, tt.r.Key = "r", policy.MustParseKey("ip")
		if _, err := policy.New([]policy.Rule{tt.r}, policy.Options{}); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
	for _, bad := range []string{"600", "99", "6xx", "abc"} {
		if _, err := policy.ParseStatuses([]string{bad}); err == nil {
			t.Errorf("ParseStatuses(%q) succeeded", bad)
		}
	}
	s, _ := policy.ParseStatuses([]string{"5xx", "429"})
	for code, want := range map[int]bool{500: true, 503: true, 599: true, 429: true, 404: false, 200: false} {
		if s.Contains(code) != want {
			t.Errorf("%s Contains(%d) = %v", s, code, !want)
		}
	}
}
