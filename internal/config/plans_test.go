package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/policy"
)

func TestUsagePlansExample(t *testing.T) {
	c, err := config.Load("../../examples/usage-plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range c.Policy.Rules() {
		names = append(names, r.Name)
	}
	want := "global stage/prod method/create-order plan/basic plan/basic/quota plan/gold plan/gold/quota per-ip-5min login-failures"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("rules = %s\nwant   %s", got, want)
	}
	levels := map[string]string{"global": "global", "stage/prod": "stage", "method/create-order": "method", "plan/gold": "plan", "plan/gold/quota": "quota", "per-ip-5min": "rate-rule"}
	for r, l := range levels {
		if c.Gateway.Levels[r] != l {
			t.Errorf("level of %s = %q, want %q", r, c.Gateway.Levels[r], l)
		}
	}
	g := c.Gateway
	if k, ok := g.Keys.Lookup("demo-gold-key"); !ok || k != (apikey.Key{ID: "demo-gold", Plan: "gold"}) {
		t.Errorf("Lookup(demo-gold-key) = %v, %v", k, ok)
	}
	if g.KeyHeader != "X-API-Key" || g.LimitsPath != "/v1/limits" || !filepath.IsAbs(g.KeysFile) || filepath.Base(g.KeysFile) != "keys.yaml" {
		t.Errorf("model = header %q, limits %q, keys file %q", g.KeyHeader, g.LimitsPath, g.KeysFile)
	}
	// The throttles: rate and burst, burst defaulting to the rate.
	for name, lim := range map[string]string{"global": "10000/s burst 5000", "stage/prod": "350/s", "method/create-order": "50/s", "plan/gold": "300/s", "plan/gold/quota": "500000/day"} {
		if got := c.Policy.Rule(name).Limit.String(); got != lim {
			t.Errorf("%s limit = %s, want %s", name, got, lim)
		}
	}
	basic := g.Plans["basic"]
	for _, tt := range []struct {
		method, path string
		want         bool
	}{{"GET", "/pets/7", true}, {"POST", "/orders", true}, {"DELETE", "/orders", false}, {"GET", "/admin", false}} {
		if got := basic.Covers(&policy.Request{Method: tt.method, Path: tt.path}); got != tt.want {
			t.Errorf("basic covers %s %s = %v, want %v", tt.method, tt.path, got, tt.want)
		}
	}
	if !g.Plans["gold"].Covers(&policy.Request{Method: "DELETE", Path: "/anything"}) {
		t.Error("a plan without routes covers every route")
	}
	rr := c.Policy.Rule("per-ip-5min")
	if rr.Algorithm != "sliding-log" || rr.Limit.String() != "2000/5m0s" || rr.Key.String() != "ip" {
		t.Errorf("rate rule = %s %s %s", rr.Algorithm, rr.Limit, rr.Key)
	}
}

func TestGatewayModelErrors(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keys, []byte("keys:\n  - {id: a, plan: nope, sha256: "+apikey.Hash("k")+"}\n  - {id: b, plan: gold, sha256: xyz}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "portero.yaml")
	yaml := `upstreams: {api: {url: "http://127.0.0.1:3000"}}
routes: [{upstream: api}]
address_lists:
  ok: [192.0.2.0/24]
levels:
  global: {rate: 1000}
  stages:
    - {name: prod, match: {host: api.example.com}, rate: 350, burst: 350}
  methods:
    - {name: orders, stage: prod, match: {methods: [POST], path: /orders}, rate: 500}
    - {name: lost, stage: staging, rate: 1}
plans:
  gold: {rate: 2000, quota: 10/h}
  empty: {}
api_keys:
  file: keys.yaml
rate_rules:
  - {name: w1, limit: 5, window: 90s}
  - {name: w2, limit: 100, aggregate: custom, keys: [ip, method, path, host, header:A, header:B]}
  - {name: w3, limit: 100, aggregate: constant}
  - {name: w4, limit: 100, aggregate: forwarded_ip}
  - {name: w5, limit: 100, scope_down: {addresses: [nosuch]}, action: captcha}
limits_endpoint: v1/limits
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(file)
	if err == nil {
		t.Fatal("accepted")
	}
	got := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
	for _, want := range []string{
		// A lower level that promises more names both, with the line of the one above.
		"portero.yaml:10:7: levels.methods[0]: rate 500/s is more than levels.stages[0] (prod) allows (350/s, portero.yaml:8:7)",
		"portero.yaml:10:7: levels.methods[0]: burst 500 is more than levels.stages[0] (prod) allows (350, portero.yaml:8:7)",
		"portero.yaml:11:27: levels.methods[1].stage: \"staging\": a method level names one of levels.stages (have prod)",
		"portero.yaml:13:9: plans.gold: rate 2000/s is more than levels.global allows (1000/s, portero.yaml:6:11)",
		"portero.yaml:13:29: plans.gold.quota: 10/h: invalid limit: a quota is per calendar day, week or month",
		"portero.yaml:14:10: plans.empty: a plan needs a throttle",
		"keys.yaml:2:19: keys[0].plan: \"nope\": no such plan (have empty, gold)",
		"keys.yaml:3:33: keys[1].sha256: \"xyz\": want the 64 hexadecimal digits of a SHA-256",
		"portero.yaml:18:23: rate_rules[0].limit: 5: at least 10 requests per window",
		"portero.yaml:18:34: rate_rules[0].window: \"90s\": want 60s, 120s, 300s (the default) or 600s",
		"rate_rules[1].keys: 6 keys: want 1 to 5",
		"rate_rules[2].scope_down: required with aggregate constant",
		"rate_rules[3].aggregate: forwarded_ip reads the client_ip header from trusted proxies only",
		"rate_rules[4].scope_down.addresses[0]: \"nosuch\": neither an address list (have ok) nor an address or CIDR",
		"rate_rules[4].action: \"captcha\": want block",
		"limits_endpoint: \"v1/limits\": want a path such as /v1/limits, or off",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("got:\n%s", got)
	}
}

func TestKeysFileNeedsPlans(t *testing.T) {
	_, err := config.Parse("p.yaml", []byte("upstreams: {api: {url: \"http://127.0.0.1:3000\"}}\nroutes: [{upstream: api}]\nplans: {gold: {rate: 10}}\n"))
	if err == nil || !strings.Contains(err.Error(), "plans are chosen by API key: add api_keys") {
		t.Errorf("plans without keys: %v", err)
	}
	_, err = config.Parse("p.yaml", []byte("upstreams: {api: {url: \"http://127.0.0.1:3000\"}}\nroutes: [{upstream: api}]\nrules: [{name: global, key: global, limit: 10/s}]\nlevels: {global: {rate: 5}}\n"))
	if err == nil || !strings.Contains(err.Error(), `levels.global: compiles to rule "global", a name rules[0] already uses`) {
		t.Errorf("a level named as a rule: %v", err)
	}
}

// TestPlanQuota reads a plan's quota as a calendar period (portero.ParseQuota):
// 500000/d is the calendar day there, as 500000/day, with or without a
// zone; a window of fixed length is refused at its line.
func TestPlanQuota(t *testing.T) {
	const head = "upstreams: {api: {url: \"http://127.0.0.1:3000\"}}\nroutes: [{upstream: api}]\napi_keys: {keys: [{id: a, plan: gold, sha256: " +
		"0000000000000000000000000000000000000000000000000000000000000000}]}\nplans:\n  gold:\n    rate: 10\n    quota: "
	for quota, want := range map[string]portero.Limit{
		"500000/d":                  portero.PerDay(500000),
		"500000/day":                portero.PerDay(500000),
		"500000/d tz Europe/Madrid": portero.PerDay(500000).WithZone("Europe/Madrid"),
		"100000/month offset 14d":   portero.PerMonth(100000).WithOffset(14 * 24 * time.Hour),
	} {
		c, err := config.Parse("p.yaml", []byte(head+quota+"\n"))
		if err != nil {
			t.Errorf("quota %q: %v", quota, err)
			continue
		}
		r := c.Policy.Rule("plan/gold/quota")
		if r == nil || r.Limit != want || r.Algorithm != portero.FixedWindow {
			t.Errorf("quota %q compiles to %+v, want a fixed window of %v", quota, r, want)
		}
	}
	for quota, want := range map[string]string{
		"1000/24h": "p.yaml:7:12: plans.gold.quota: 1000/24h: invalid limit: a quota is per calendar day, week or month, such as 500000/day, 500000/d or 100000/month",
		"10/2d":    "p.yaml:7:12: plans.gold.quota: 10/2d: invalid limit: a quota is per calendar day, week or month",
		"10/days":  "p.yaml:7:12: plans.gold.quota: 10/days: invalid limit: window \"days\": a calendar period is one day",
		"0/d":      "p.yaml:7:12: plans.gold.quota: 0/d: invalid limit: count 0",
	} {
		_, err := config.Parse("p.yaml", []byte(head+quota+"\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("quota %q: error %v, want %q", quota, err, want)
		}
	}
}
