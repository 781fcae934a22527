package sameanswer_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// gatewayDoor is `portero serve`'s gateway over st, from sc's configuration
// file with the built-in demo upstream, under failure policy pol.
func gatewayDoor(t *testing.T, sc scenario, st portero.Store, pol portero.FailurePolicy) door {
	t.Helper()
	cfg, err := config.Parse("sameanswer.yaml", []byte("upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n"+sc.gatewayYAML))
	if err != nil {
		t.Fatal(err)
	}
	if pol != "" {
		cfg.OnError = pol
	}
	g, err := gateway.New(cfg, st, gateway.Hooks{Now: sc.now})
	if err != nil {
		t.Fatal(err)
	}
	g.SetReady(true)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return middleware{url: srv.URL, label: "gateway"}
}

// auth: the rule as descriptors at /v1/auth, as Traefik's forwardAuth asks
// (no X-Original-URI: a refusal is 429), each descriptor's value from the
// request's X-Api-Key.
type auth struct {
	url   string
	descs map[string][]string
}

func (auth) name() string { return "/v1/auth" }

// expresses: /v1/auth counts one per request.
func (auth) expresses(r request) bool { return r.cost == 1 }

func (d auth) ask(t *testing.T, r request) answer {
	t.Helper()
	q := url.Values{"domain": {"edge"}}
	for _, key := range d.descs[r.rule] {
		q.Add("descriptor", key+"={header:X-Api-Key}")
	}
	req, _ := http.NewRequest("GET", d.url+"/v1/auth?"+q.Encode(), nil)
	req.Header.Set("X-Api-Key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a := fromHeader(resp.Header)
	switch resp.StatusCode {
	case 200:
		a.Allowed = true
	case 429:
		var p httplimit.Problem
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("problem body %q: %v", body, err)
		}
		a.NeverPasses = neverPasses(t, body)
		a.Unavailable = p.Type == httplimit.ProblemTemporaryReducedCapacity
	default:
		t.Fatalf("/v1/auth: %d %s", resp.StatusCode, body)
	}
	return a
}

// TestSameAnswerAuth is TestSameAnswer's rule with /v1/auth among the doors,
// for the requests it can ask: one unit each.
func TestSameAnswerAuth(t *testing.T) {
	sc := basic
	sc.auth = true
	ds := doorsFor(t, sc, memStores(t), "")
	api := func(r int) answer {
		return answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=` + string(rune('0'+r)) + `;t=50`}
	}
	for i, step := range []struct {
		r    request
		want answer
	}{
		{request{"api", 1}, api(4)},
		{request{"api", 1}, api(3)},
		{request{"api", 1}, api(2)},
		{request{"api", 1}, api(1)},
		{request{"api", 1}, api(0)},
		{request{"api", 1}, answer{Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`, RetryAfter: "50"}},
		{request{"dark", 1}, answer{Allowed: true}}, // shadow: counted, never announced
		{request{"dark", 1}, answer{Allowed: true}}, // over its limit, still allowed
	} {
		if got := askAll(t, ds, step.r); got != step.want {
			t.Errorf("step %d %+v: every door says\n  %v\nwant\n  %v", i, step.r, got, step.want)
		}
	}
}

// clock is a scenario's clock, from t0, moved by the test.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(t0.UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// step is one request of a stacked scenario and the answer every door must
// give, after moving the clock by wait.
type step struct {
	wait time.Duration
	r    request
	want answer
}

func run(t *testing.T, ds []door, c *clock, steps []step) {
	t.Helper()
	for i, s := range steps {
		c.advance(s.wait)
		if got := askAll(t, ds, s.r); got != s.want {
			t.Errorf("step %d %+v: every door says\n  %v\nwant\n  %v", i, s.r, got, s.want)
		}
	}
}

func mustPolicy(t *testing.T, rules ...policy.Rule) *policy.Policy {
	t.Helper()
	p, err := policy.New(rules, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var perKey = policy.MustParseKey("header:X-Api-Key")

// TestSameAnswerStackedQuota: a rate rule of 2 a minute stacked on a
// calendar quota of 3 a day, at every door. The request the rate rule
// refuses counts nothing under the quota, so after a minute one more
// request passes and spends the quota; the next is refused by the quota
// alone, until the end of the UTC day.
func TestSameAnswerStackedQuota(t *testing.T) {
	c := newClock()
	quota, err := portero.ParseQuota("3/day")
	if err != nil {
		t.Fatal(err)
	}
	path := policy.Match{Path: "/sameanswer.Edge/quota"}
	sc := scenario{
		rules: func(t *testing.T) *policy.Policy {
			return mustPolicy(t,
				policy.Rule{Name: "per-key", Match: path, Key: perKey, Algorithm: portero.FixedWindow, Limit: portero.PerMinute(2)},
				policy.Rule{Name: "daily", Match: path, Key: perKey, Limit: quota})
		},
		gatewayYAML: `
rules:
  - {name: per-key, match: {path: /sameanswer.Edge/quota}, key: "header:X-Api-Key", algorithm: fixed-window, limit: 2/min}
  - {name: daily, match: {path: /sameanswer.Edge/quota}, key: "header:X-Api-Key", limit: 3/day}
`,
		envoyYAML: `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 2}
  - key: daily
    rate_limit: {name: daily, unit: day, requests_per_unit: 3, portero: {calendar: true}}
`,
		descriptors: map[string][]string{"quota": {"api_key", "daily"}},
		now:         c.now,
		auth:        true,
	}
	ds := doorsFor(t, sc, memStores(t), "")
	const pol = `"per-key";q=2;w=60, "daily";q=3;w=86400`
	// t0 is 08:00:10 UTC: 57590 s to the end of the day, 57530 a minute later.
	run(t, ds, c, []step{
		{0, request{"quota", 1}, answer{Allowed: true, Policy: pol, RateLimit: `"per-key";r=1;t=50, "daily";r=2;t=57590`}},
		{0, request{"quota", 1}, answer{Allowed: true, Policy: pol, RateLimit: `"per-key";r=0;t=50, "daily";r=1;t=57590`}},
		{0, request{"quota", 1}, answer{Policy: pol, RateLimit: `"per-key";r=0;t=50`, RetryAfter: "50"}},
		{time.Minute, request{"quota", 1}, answer{Allowed: true, Policy: pol, RateLimit: `"per-key";r=1;t=50, "daily";r=0;t=57530`}},
		{0, request{"quota", 1}, answer{Policy: pol, RateLimit: `"daily";r=0;t=57530`, RetryAfter: "57530"}},
	})
}

// TestSameAnswerStackedConcurrency: a rate rule stacked on a concurrency
// limit of one request in flight per API key, at the doors of Portero's
// policy (the descriptors have no concurrency limit). While another
// request holds the key's slot, a request is refused with 429 and the rate
// rule counts nothing for it.
func TestSameAnswerStackedConcurrency(t *testing.T) {
	c := newClock()
	path := policy.Match{Path: "/sameanswer.Edge/conc"}
	conc := portero.ConcurrencyRule{Name: "conc", Max: 1}
	sc := scenario{
		rules: func(t *testing.T) *policy.Policy {
			return mustPolicy(t,
				policy.Rule{Name: "per-key", Match: path, Key: perKey, Algorithm: portero.FixedWindow, Limit: portero.PerMinute(5)},
				policy.Rule{Name: "conc", Match: path, Key: perKey, Concurrency: conc})
		},
		gatewayYAML: `
rules:
  - {name: per-key, match: {path: /sameanswer.Edge/conc}, key: "header:X-Api-Key", algorithm: fixed-window, limit: 5/min}
  - {name: conc, match: {path: /sameanswer.Edge/conc}, key: "header:X-Api-Key", concurrency: {max: 1}}
`,
		now: c.now,
	}
	var stores []portero.Store
	open := memStores(t)
	ds := doorsFor(t, sc, func() portero.Store { st := open(); stores = append(stores, st); return st }, "")
	const pol = `"per-key";q=5;w=60, "conc";q=1;qu="concurrent-requests"`
	run(t, ds, c, []step{{0, request{"conc", 1}, answer{Allowed: true, Policy: pol, RateLimit: `"per-key";r=4;t=50, "conc";r=0`}}})
	// Another request of the key is in flight at every door.
	key, _ := mustPolicy(t).KeyOf(perKey, nil, &policy.Request{Header: map[string][]string{"X-Api-Key": {"k"}}})
	var held []portero.Lease
	for _, st := range stores {
		l, d, err := st.(portero.LeaseStore).Acquire(context.Background(), c.now(), conc, key)
		if err != nil || !d.Allowed {
			t.Fatalf("the other request's lease: %+v, %v", d, err)
		}
		held = append(held, l)
	}
	run(t, ds, c, []step{{0, request{"conc", 1}, answer{Policy: pol, RateLimit: `"conc";r=0`, RetryAfter: "1"}}})
	for _, l := range held {
		l.Release(context.Background())
	}
	run(t, ds, c, []step{{0, request{"conc", 1}, answer{Allowed: true, Policy: pol, RateLimit: `"per-key";r=3;t=50, "conc";r=0`}}})
}

// TestSameAnswerStackedShape: a sliding log (which cannot give back what it
// counted) stacked on a queue of 2 places
// draining 2/s shaped {delay: 1, max_delay: 100ms}, at the middleware and
// the gateway (the doors with shapes): the first request passes at once,
// the next two would be held 0.5 s and are refused, counting nothing under
// the rate rule; once the queue has drained, a request passes again.
func TestSameAnswerStackedShape(t *testing.T) {
	c := newClock()
	path := policy.Match{Path: "/sameanswer.Edge/pace"}
	sc := scenario{
		rules: func(t *testing.T) *policy.Policy {
			return mustPolicy(t,
				policy.Rule{Name: "per-key", Match: path, Key: perKey, Algorithm: portero.SlidingLog, Limit: portero.PerMinute(5)},
				policy.Rule{Name: "pace", Match: path, Key: perKey, Algorithm: portero.LeakyQueue, Limit: portero.MustParseLimit("2/s")})
		},
		shapes: map[string]overload.Shape{"pace": {Delay: 1, MaxDelay: 100 * time.Millisecond}},
		gatewayYAML: `
rules:
  - {name: per-key, match: {path: /sameanswer.Edge/pace}, key: "header:X-Api-Key", algorithm: sliding-log, limit: 5/min}
  - {name: pace, match: {path: /sameanswer.Edge/pace}, key: "header:X-Api-Key", algorithm: leaky-queue, limit: 2/s, shape: {delay: 1, max_delay: 100ms}}
`,
		now: c.now,
	}
	ds := doorsFor(t, sc, memStores(t), "")
	const pol = `"per-key";q=5;w=60, "pace";q=2;w=1`
	refused := answer{Policy: pol, RateLimit: `"pace";r=1;t=1`, RetryAfter: "1"}
	run(t, ds, c, []step{
		{0, request{"pace", 1}, answer{Allowed: true, Policy: pol, RateLimit: `"per-key";r=4;t=60, "pace";r=1;t=1`}},
		{0, request{"pace", 1}, refused},
		{0, request{"pace", 1}, refused},
		{time.Second, request{"pace", 1}, answer{Allowed: true, Policy: pol, RateLimit: `"per-key";r=3;t=60, "pace";r=1;t=1`}},
	})
}
