package policy_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/policy/policytest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustPolicy(t *testing.T, rules ...policy.Rule) *policy.Policy {
	t.Helper()
	p, err := policy.New(rules, policy.Options{})
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	return p
}

func req(method, path, ip string) *policy.Request {
	r := &policy.Request{Method: method, Path: path, Host: "api.example.com", Header: map[string][]string{}}
	if ip != "" {
		r.ClientIP = netip.MustParseAddr(ip)
	}
	return r
}

func TestPathPattern(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"/login", "/login", true},
		{"/login", "/login/", true},
		{"/login", "//login", true},
		{"/login", "/x/../login", true},
		{"/login", "/login/x", false},
		{"/login", "/logins", false},
		{"/users/{id}", "/users/42", true},
		{"/users/{id}", "/users", false},
		{"/users/{id}", "/users/42/x", false},
		{"/users/*/posts", "/users/7/posts", true},
		{"/api/**", "/api", true},
		{"/api/**", "/api/a/b/c", true},
		{"/api/**", "/apis", false},
		{"/files/{rest...}", "/files/a/b", true},
		{"/", "/", true},
		{"/", "/x", false},
		{"", "/anything", true},
	}
	for _, tt := range tests {
		p, err := policy.ParsePathPattern(tt.pattern)
		if err != nil {
			t.Fatalf("ParsePathPattern(%q): %v", tt.pattern, err)
		}
		if got := p.Matches(tt.path); got != tt.want {
			t.Errorf("%q.Matches(%q) = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
	for _, bad := range []string{"login", "/a/**/b", "/a*", "/a/", "/a//b", "/a/../b"} {
		if _, err := policy.ParsePathPattern(bad); err == nil {
			t.Errorf("ParsePathPattern(%q) succeeded, want error", bad)
		}
	}
}

func TestParseKey(t *testing.T) {
	for in, want := range map[string]string{
		"ip":                   "ip",
		" IP + method ":        "ip+method",
		"header:x-api-key":     "header:X-Api-Key",
		"tenant+user":          "tenant+user",
		"identity:plan+global": "identity:plan+global",
		"route+host":           "route+host",
	} {
		k, err := policy.ParseKey(in)
		if err != nil {
			t.Errorf("ParseKey(%q): %v", in, err)
			continue
		}
		if k.String() != want {
			t.Errorf("ParseKey(%q) = %q, want %q", in, k, want)
		}
	}
	for _, bad := range []string{"", "ip+", "cookie", "header:", "header:a b", "ip+ip", "ip:5", "user:x"} {
		if _, err := policy.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) succeeded, want error", bad)
		}
	}
}

func TestKeys(t *testing.T) {
	store := &policytest.Store{}
	p := mustPolicy(t,
		policy.Rule{Name: "ip", Key: policy.MustParseKey("ip"), Limit: portero.PerMinute(100)},
		policy.Rule{Name: "apikey", Key: policy.MustParseKey("header:X-API-Key+method"), Limit: portero.PerMinute(100)},
		policy.Rule{Name: "user", Key: policy.MustParseKey("tenant+user"), Limit: portero.PerMinute(100)},
		policy.Rule{Name: "route", Match: policy.Match{Path: "/users/{id}"}, Key: policy.MustParseKey("route"), Limit: portero.PerMinute(100)},
		policy.Rule{Name: "global", Key: policy.MustParseKey("global"), Limit: portero.PerMinute(100)},
	)
	r := req("GET", "/users/7", "2001:db8:1:2:3:4:5:6")
	r.Header["X-Api-Key"] = []string{"k+=1"}
	r.Identity = map[string]string{"user": "alice", "tenant": "acme"}
	v, err := evaluate(p, context.Background(), store, t0, r)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, res := range v.Results {
		got[res.Rule.Name] = res.Key
	}
	want := map[string]string{
		"ip":     "ip=2001:db8:1:2::/64",
		"apikey": "header:X-Api-Key=k%2B%3D1+method=GET",
		"user":   "tenant=acme+user=alice",
		"route":  "route=* /users/{id}",
		"global": "global=*",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("key of rule %s = %q, want %q", name, got[name], w)
		}
	}
	// Without an API key or a user, those rules do not apply.
	v, err = evaluate(p, context.Background(), store, t0, req("GET", "/", "192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, res := range v.Results {
		names = append(names, res.Rule.Name+"="+res.Key)
	}
	if got, want := strings.Join(names, " "), "ip=ip=192.0.2.1/32 global=global=*"; got != want {
		t.Errorf("rules applied = %q, want %q", got, want)
	}
	// A long header value is hashed.
	r = req("GET", "/", "")
	r.Header["X-Api-Key"] = []string{strings.Repeat("x", 1000)}
	v, _ = evaluate(p, context.Background(), store, t0, r)
	if k := v.Results[0].Key; len(k) > 100 || !strings.Contains(k, "sha256:") {
		t.Errorf("long key = %q, want a short hash", k)
	}
}

func TestIPv6Prefix(t *testing.T) {
	p, err := policy.New([]policy.Rule{{Name: "ip", Key: policy.MustParseKey("ip"), Limit: portero.PerMinute(1)}}, policy.Options{IPv6Prefix: 56})
	if err != nil {
		t.Fatal(err)
	}
	store := &policytest.Store{}
	if v, _ := evaluate(p, context.Background(), store, t0, req("GET", "/", "2001:db8:0:1::1")); !v.Allowed {
		t.Fatal("first request refused")
	}
	// Another address in the same /56: same key, refused.
	v, _ := evaluate(p, context.Background(), store, t0, req("GET", "/", "2001:db8:0:ff::2"))
	if v.Allowed {
		t.Fatalf("second address in the same /56 allowed, key %q", v.Results[0].Key)
	}
	// IPv4-mapped IPv6 counts as the IPv4 address.
	if v, _ := evaluate(p, context.Background(), store, t0, req("GET", "/", "::ffff:192.0.2.1")); v.Results[0].Key != "ip=192.0.2.1/32" {
		t.Errorf("mapped key = %q", v.Results[0].Key)
	}
}

func TestMatch(t *testing.T) {
	p := mustPolicy(t, policy.Rule{
		Name: "m",
		Match: policy.Match{Methods: []string{"POST"}, Path: "/login", Host: "*.example.com",
			Headers: map[string]string{"X-Tier": "free", "X-Present": "*"}},
		Key: policy.MustParseKey("global"), Limit: portero.PerMinute(1),
	})
	base := func() *policy.Request {
		r := req("POST", "/login", "192.0.2.1")
		r.Host = "API.example.com:8443"
		r.Header["X-Tier"] = []string{"free"}
		r.Header["X-Present"] = []string{""}
		return r
	}
	cases := map[string]func(*policy.Request){
		"all match":  nil,
		"method":     func(r *policy.Request) { r.Method = "GET" },
		"path":       func(r *policy.Request) { r.Path = "/logout" },
		"host":       func(r *policy.Request) { r.Host = "example.org" },
		"bare host":  func(r *policy.Request) { r.Host = "example.com" },
		"header":     func(r *policy.Request) { r.Header["X-Tier"] = []string{"pro"} },
		"no header":  func(r *policy.Request) { delete(r.Header, "X-Present") },
		"dot slash":  func(r *policy.Request) { r.Path = "/./login/" },
		"dot dot":    func(r *policy.Request) { r.Path = "/a/../login" },
		"other path": func(r *policy.Request) { r.Path = "/login2" },
	}
	want := map[string]bool{"all match": true, "dot slash": true, "dot dot": true}
	for name, mod := range cases {
		r := base()
		if mod != nil {
			mod(r)
		}
		v, err := evaluate(p, context.Background(), &policytest.Store{}, t0, r)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(v.Results) == 1; got != want[name] {
			t.Errorf("%s: matched = %v, want %v", name, got, want[name])
		}
	}
}

// TestStackedAllOrNothing: a request refused by one rule consumes nothing
// from the others, and the verdict names the refusing rule with its own
// numbers.
func TestStackedAllOrNothing(t *testing.T) {
	store := &policytest.Store{}
	p := mustPolicy(t,
		policy.Rule{Name: "per-ip", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(10)},
		policy.Rule{Name: "login", Match: policy.Match{Methods: []string{"POST"}, Path: "/login"}, Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(2)},
	)
	ctx := context.Background()
	for i := range 2 {
		v, err := evaluate(p, ctx, store, t0, req("POST", "/login", "192.0.2.1"))
		if err != nil || !v.Allowed {
			t.Fatalf("login %d: allowed=%v err=%v", i, v.Allowed, err)
		}
	}
	v, err := evaluate(p, ctx, store, t0, req("POST", "/login", "192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Allowed || len(v.Violated) != 1 {
		t.Fatalf("third login: allowed=%v violated=%v", v.Allowed, v.Violated)
	}
	bad := v.Results[v.Violated[0]]
	if bad.Rule.Name != "login" || bad.Decision.Limit != 2 || bad.Decision.Remaining != 0 || bad.Decision.RetryAfter <= 0 {
		t.Errorf("violated = %s limit %d remaining %d retry %v, want login 2 0 >0", bad.Rule.Name, bad.Decision.Limit, bad.Decision.Remaining, bad.Decision.RetryAfter)
	}
	if v.Results[0].Outcome != engine.NotCounted || v.Results[1].Outcome != engine.Refused {
		t.Errorf("outcomes = %s, %s, want not-counted, refused", v.Results[0].Outcome, v.Results[1].Outcome)
	}
	// Refused logins did not consume per-ip: 8 reads remain (10 − 2).
	for i := range 8 {
		v, _ := evaluate(p, ctx, store, t0, req("GET", "/", "192.0.2.1"))
		if !v.Allowed {
			t.Fatalf("read %d refused: refused logins were counted under per-ip", i)
		}
	}
	v, _ = evaluate(p, ctx, store, t0, req("GET", "/", "192.0.2.1"))
	if v.Allowed {
		t.Fatal("read 9 allowed, want per-ip exhausted")
	}
}

func TestShadow(t *testing.T) {
	store := &policytest.Store{}
	p := mustPolicy(t,
		policy.Rule{Name: "strict", Mode: policy.Shadow, Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1)},
		policy.Rule{Name: "loose", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(3)},
	)
	ctx := context.Background()
	var outcomes []string
	for range 4 {
		v, err := evaluate(p, ctx, store, t0, req("GET", "/", "192.0.2.1"))
		if err != nil {
			t.Fatal(err)
		}
		outcomes = append(outcomes, v.Results[0].Outcome.String()+"/"+v.Results[1].Outcome.String())
	}
	want := "near-limit/allowed shadow-refused/allowed shadow-refused/near-limit shadow-refused/refused"
	if got := strings.Join(outcomes, " "); got != want {
		t.Errorf("outcomes = %s\nwant       %s", got, want)
	}
}

func TestCost(t *testing.T) {
	store := &policytest.Store{}
	p := mustPolicy(t,
		policy.Rule{Name: "units", Key: policy.MustParseKey("global"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(10), Cost: mustCost(t, "header:X-Cost")},
		policy.Rule{Name: "bytes", Match: policy.Match{Methods: []string{"POST"}}, Key: policy.MustParseKey("global"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1000), Cost: mustCost(t, "content-length")},
	)
	ctx := context.Background()
	r := req("GET", "/", "")
	r.Header["X-Cost"] = []string{"4"}
	v, err := evaluate(p, ctx, store, t0, r)
	if err != nil || v.Results[0].Cost != 4 || v.Results[0].Decision.Remaining != 6 {
		t.Fatalf("cost 4: %+v %v", v, err)
	}
	r.Header["X-Cost"] = []string{"-1"}
	_, err = evaluate(p, ctx, store, t0, r)
	var re *policy.RuleError
	if !errors.As(err, &re) || !errors.Is(err, policy.ErrBadCost) || !strings.Contains(err.Error(), "X-Cost") {
		t.Errorf("bad cost header: err = %v", err)
	}
	// More than the rule admits at once is no error: the engine refuses it
	// as a request that can never pass.
	r.Header["X-Cost"] = []string{"11"}
	if v, err = evaluate(p, ctx, store, t0, r); err != nil || v.Allowed || v.Results[0].Outcome != engine.CanNeverPass {
		t.Errorf("cost 11 > 10: %+v, %v; want refused, can never pass", v, err)
	}
	post := req("POST", "/", "")
	post.ContentLength = -1
	if _, err = evaluate(p, ctx, store, t0, post); !errors.Is(err, policy.ErrLengthRequired) {
		t.Errorf("unknown length: err = %v", err)
	}
	post.ContentLength = 600
	if v, err := evaluate(p, ctx, store, t0, post); err != nil || !v.Allowed || v.Results[1].Cost != 600 {
		t.Fatalf("600 bytes: %+v %v", v, err)
	}
	if v, _ := evaluate(p, ctx, store, t0, post); v.Allowed {
		t.Error("second 600 bytes allowed, want refused by bytes")
	}
}

func mustCost(t *testing.T, s string) policy.Cost {
	t.Helper()
	c, err := policy.ParseCost(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewErrors(t *testing.T) {
	_, err := policy.New([]policy.Rule{
		{Name: "ok", Key: policy.MustParseKey("ip"), Limit: portero.PerMinute(1)},
		{Name: "ok", Key: policy.MustParseKey("ip"), Limit: portero.PerMinute(1)},
		{Name: "bad name!", Key: policy.MustParseKey("ip"), Limit: portero.PerMinute(1)},
		{Name: "nokey", Limit: portero.PerMinute(1)},
		{Name: "zero", Key: policy.MustParseKey("ip")},
		{Name: "mode", Mode: "dry", Key: policy.MustParseKey("ip"), Limit: portero.PerMinute(1)},
	}, policy.Options{IPv6Prefix: 200})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"rules[1] (ok): name already used", "rules[2]", "rules[3] (nokey): key: required", "rules[4] (zero)", "rules[5] (mode): mode \"dry\"", "ipv6 prefix /200"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestStoreError(t *testing.T) {
	store := &policytest.Store{}
	store.SetErr(portero.ErrStoreUnavailable)
	p := mustPolicy(t, policy.Rule{Name: "g", Key: policy.MustParseKey("global"), Limit: portero.PerMinute(1)})
	if _, err := evaluate(p, context.Background(), store, t0, req("GET", "/", "")); !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Errorf("err = %v, want ErrStoreUnavailable", err)
	}
}

func TestQuota(t *testing.T) {
	for _, tt := range []struct {
		alg   portero.Algorithm
		limit string
		q     int64
		w     time.Duration
	}{
		{portero.FixedWindow, "100/min", 100, time.Minute},
		{portero.TokenBucket, "10/s burst 20", 20, 2 * time.Second},
		{portero.GCRA, "5/min", 5, time.Minute},
	} {
		r := policy.Rule{Name: "r", Key: policy.MustParseKey("ip"), Algorithm: tt.alg, Limit: portero.MustParseLimit(tt.limit)}
		p := mustPolicy(t, r)
		q, w := p.Rules()[0].Engine().Quota()
		if q != tt.q || w != tt.w {
			t.Errorf("%s %s: Quota() = %d, %v, want %d, %v", tt.alg, tt.limit, q, w, tt.q, tt.w)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"ip", "header:X-API-Key+method", "tenant+user", "identity:x", "+", "header:", "ip+ip"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := policy.ParseKey(s)
		if err != nil {
			return
		}
		// The canonical form parses to itself.
		k2, err := policy.ParseKey(k.String())
		if err != nil || k2.String() != k.String() {
			t.Fatalf("ParseKey(%q) = %q, reparsed %q, %v", s, k, k2, err)
		}
	})
}

func FuzzPathPattern(f *testing.F) {
	for _, s := range []string{"/login", "/users/{id}", "/api/**", "/a/*/b", "", "/", "/{x...}"} {
		f.Add(s, "/users/42")
	}
	f.Fuzz(func(t *testing.T, pattern, path string) {
		p, err := policy.ParsePathPattern(pattern)
		if err != nil {
			return
		}
		p.Matches(path) // must not panic
		if pattern != "" && !strings.ContainsAny(pattern, "*{") && !p.Matches(pattern) {
			t.Fatalf("literal pattern %q does not match itself", pattern)
		}
	})
}

func FuzzParseCost(f *testing.F) {
	for _, s := range []string{"1", "header:X-Cost", "content-length", "0", "-3", "header:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := policy.ParseCost(s)
		if err != nil {
			return
		}
		if _, err := policy.ParseCost(c.String()); err != nil {
			t.Fatalf("ParseCost(%q).String() = %q does not parse: %v", s, c, err)
		}
	})
}

// A calendar quota stacks with a rate and is checked separately: its
// algorithm defaults to the fixed window, a refusal by it says so
// (Decision.Quota) and waits for the next period, a refusal by the rate
// does not, and neither spends the other (all-or-nothing).
func TestCalendarQuota(t *testing.T) {
	store := &policytest.Store{}
	p := mustPolicy(t,
		policy.Rule{Name: "rate", Key: policy.MustParseKey("ip"), Algorithm: portero.TokenBucket, Limit: portero.PerSecond(2)},
		policy.Rule{Name: "quota", Key: policy.MustParseKey("ip"), Limit: portero.PerDay(3).WithZone("Europe/Madrid")},
	)
	q := p.Rule("quota")
	if q.Algorithm != portero.FixedWindow {
		t.Fatalf("a quota's default algorithm = %s, want fixed-window", q.Algorithm)
	}
	if n, w := q.Engine().Quota(); n != 3 || w != 24*time.Hour {
		t.Errorf("Quota() = %d, %v; want 3, 24h", n, w)
	}
	ctx := context.Background()
	now := time.Date(2024, 3, 31, 20, 0, 0, 0, time.UTC) // 22:00 in Madrid
	eval := func(at time.Time) *engine.Verdict {
		t.Helper()
		v, err := evaluate(p, ctx, store, at, req("GET", "/", "192.0.2.1"))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Two at once pass; the third at the same instant is refused by the
	// rate, and says it is no quota; it spends no quota.
	eval(now)
	eval(now)
	v := eval(now)
	if v.Allowed || len(v.Violated) != 1 || v.Results[v.Violated[0]].Rule.Name != "rate" || v.Results[v.Violated[0]].Decision.Quota {
		t.Fatalf("third at once: %+v, want refused by the rate, not as a quota", v)
	}
	// Not counted: it says what is available now (nothing was taken).
	if d := v.Results[1].Decision; !d.Quota || !d.Allowed || d.Remaining != 1 || v.Results[1].Outcome != engine.NotCounted {
		t.Errorf("quota beside the rate refusal: %+v %s, want a quota decision with 1 available, not counted", d, v.Results[1].Outcome)
	}
	// A second later the rate has room: the third unit of the quota.
	if v := eval(now.Add(time.Second)); !v.Allowed {
		t.Fatalf("a second later: %+v, want allowed", v)
	}
	// The fourth is refused by the quota until Madrid's midnight (22:00 UTC):
	// 1 h 59 min later; the rate is not spent by it.
	v = eval(now.Add(time.Minute))
	if v.Allowed || len(v.Violated) != 1 {
		t.Fatalf("fourth: %+v, want refused by one rule", v)
	}
	bad := v.Results[v.Violated[0]]
	if bad.Rule.Name != "quota" || !bad.Decision.Quota || bad.Decision.RetryAfter != 2*time.Hour-time.Minute || bad.Decision.PeriodLeft != bad.Decision.RetryAfter {
		t.Errorf("fourth: %s %+v, want the quota refusing until 22:00 UTC (1 h 59 min)", bad.Rule.Name, bad.Decision)
	}
	if r := v.Results[0]; r.Outcome != engine.NotCounted || r.Decision.Remaining != 2 {
		t.Errorf("rate beside the quota refusal: %+v %s, want its 2 available, not counted", r.Decision, r.Outcome)
	}
	if v := eval(time.Date(2024, 3, 31, 22, 0, 0, 0, time.UTC)); !v.Allowed {
		t.Errorf("at Madrid's midnight: %+v, want the quota back", v)
	}
	if _, err := policy.New([]policy.Rule{{Name: "q", Key: policy.MustParseKey("ip"), Algorithm: portero.SlidingCounter, Limit: portero.PerDay(3)}}, policy.Options{}); !errors.Is(err, portero.ErrInvalidLimit) || !strings.Contains(err.Error(), "fixed-window") {
		t.Errorf("a quota under sliding-counter: %v, want ErrInvalidLimit naming fixed-window", err)
	}
}
