package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/config"
)

func TestDefault(t *testing.T) {
	c, err := config.LoadDefault()
	if err != nil {
		t.Fatalf("default config: %v", err)
	}
	if c.StoreType != "memory" || c.Listen != "127.0.0.1:8080" || c.AdminListen != "127.0.0.1:9090" {
		t.Errorf("default: store %s listen %s admin %s", c.StoreType, c.Listen, c.AdminListen)
	}
	if len(c.Routes) != 1 || !c.Routes[0].Upstream.Demo {
		t.Errorf("default routes: %+v", c.Routes)
	}
	if len(c.Policy.Rules()) < 2 {
		t.Errorf("default has %d rules", len(c.Policy.Rules()))
	}
}

// TestExamples loads every example, so that they never rot.
func TestExamples(t *testing.T) {
	t.Setenv("PORTERO_ADMIN_TOKEN", "secret")
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) < 3 {
		t.Fatalf("found %d examples", len(files))
	}
	for _, f := range files {
		if _, err := config.Load(f); err != nil {
			t.Errorf("%s:\n%v", f, err)
		}
	}
}

func TestErrors(t *testing.T) {
	src := `server:
  listen: nowhere
  read_timeout: soon
store:
  type: redis
rules:
  - name: a
    key: ip
    limit: 10/min
  - name: a
    key: biscuit
    limit: 10/min
  - name: c
    key: ip
    limit: 0/min
  - name: d
    key: ip
    limit: 10/min
    algorithm: magic
    mode: dry-run
    cost: header:X-Cost
    match:
      path: login
      methods: [get]
  - name: e
    key: global
    limit: 5/min
    cost: 6
routes:
  - upstream: nope
`
	_, err := config.Parse("bad.yaml", []byte(src))
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v, want Errors", err)
	}
	want := []string{
		"bad.yaml:2:11: server.listen: \"nowhere\": want host:port",
		"bad.yaml:3:17: server.read_timeout: \"soon\"",
		"bad.yaml:5:3: store.url: required for type redis",
		"bad.yaml:10:11: rules[1].name: \"a\": already used by rules[0]",
		"bad.yaml:11:10: rules[1].key: key \"biscuit\": unknown part",
		"bad.yaml:15:12: rules[2].limit: 0/min: invalid limit: count 0: must be positive",
		"bad.yaml:19:16: rules[3].algorithm: unknown algorithm \"magic\"",
		"bad.yaml:20:11: rules[3].mode: \"dry-run\": want enforce or shadow",
		"bad.yaml:23:13: rules[3].match.path: \"login\": a path pattern starts with /",
		"bad.yaml:25:5: rules[4]: cost 6: cost exceeds limit",
		"bad.yaml:30:15: routes[0].upstream: \"nope\": no such upstream",
	}
	got := err.Error()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("errors lack %q\ngot:\n%s", w, got)
		}
	}
	if strings.Contains(got, "methods") {
		t.Errorf("lower-case methods should be accepted:\n%s", got)
	}
}

func TestSyntaxErrors(t *testing.T) {
	for name, src := range map[string]string{
		"unknown field": "server:\n  listn: :80\n",
		"wrong type":    "server:\n  max_in_flight: many\n",
		"bad yaml":      "rules: [\n",
		"tab":           "server:\n\tlisten: x\n",
	} {
		_, err := config.Parse("x.yaml", []byte(src))
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "x.yaml:") {
			t.Errorf("%s: %q does not start with the file name", name, err)
		}
		if name == "unknown field" && !strings.Contains(err.Error(), "x.yaml:2:3: server.listn: unknown field; did you mean listen?") {
			t.Errorf("unknown field: %v", err)
		}
	}
	if _, err := config.Parse("empty.yaml", nil); err == nil || !strings.Contains(err.Error(), "empty.yaml:1:1: routes") {
		t.Errorf("empty file: %v, want missing routes", err)
	}
}

func TestStoreValidation(t *testing.T) {
	base := "upstreams: {a: {type: demo}}\nroutes: [{upstream: a}]\n"
	for src, want := range map[string]string{
		"store: {type: redis, url: 'redis://:pw@127.0.0.1:6379/0'}":         "",
		"store: {type: redis, url: 'http://x'}":                             "store.url",
		"store: {type: redis, url: 'redis-sentinel://h:26379,h2/mymaster'}": "",
		"store: {type: redis, url: 'redis-sentinel://h:26379'}":             "store.url",
		"store: {type: memcached}":                                          "store.type",
		"store: {type: memory, on_error: maybe}":                            "store.on_error",
		"client_ip: {header: X-Forwarded-For}":                              "client_ip.header: is only read from trusted proxies",
		"client_ip: {trusted_proxies: [10.0.0.0/8, bogus]}":                 "client_ip.trusted_proxies[1]",
		"client_ip: {trusted_proxies: [10.0.0.0/8], ipv6_prefix: 200}":      "ipv6_prefix",
		"client_ip: {trusted_proxies: [10.0.0.0/8], header: 'X Real'}":      `client_ip.header: "X Real": not a header name`,
		"client_ip: {trusted_proxies: [10.0.0.0/8], header: X-Real_IP}":     "",
		"identity: {user_header: 'X-User:'}":                                `identity.user_header: "X-User:": not a header name`,
		"identity: {tenant_header: X-Tenant}":                               "",
		"admin: {listen: 'off'}":                                            "",
		"admin: {token_env: PORTERO_TEST_UNSET_VAR}":                        "admin.token_env",
	} {
		_, err := config.Parse("s.yaml", []byte(base+src))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", src, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: err = %v, want %q", src, err, want)
		}
	}
}

func TestRedacted(t *testing.T) {
	c, err := config.Parse("r.yaml", []byte("admin: {token: hunter2}\nstore: {type: redis, url: 'redis://u:pw@h:1/0'}\nupstreams: {a: {type: demo}}\nroutes: [{upstream: a}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := c.File.Redacted()
	out, _ := config.Marshal(&f)
	if strings.Contains(string(out), "hunter2") || strings.Contains(string(out), "pw@") {
		t.Errorf("secrets shown:\n%s", out)
	}
	if c.AdminToken != "hunter2" {
		t.Error("Redacted changed the original")
	}
	// A sentinel list, which url.Parse refuses, is redacted too.
	c, err = config.Parse("r.yaml", []byte("store: {type: redis, url: 'redis-sentinel://u:hunter3@h1:26379,h2/mymaster'}\nupstreams: {a: {type: demo}}\nroutes: [{upstream: a}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	f = c.File.Redacted()
	if out, _ := config.Marshal(&f); strings.Contains(string(out), "hunter3") || !strings.Contains(string(out), "h1:26379,h2/mymaster") {
		t.Errorf("sentinel URL redacted as:\n%s", out)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(config.Default())
	for _, p := range []string{"../../examples/gateway.yaml", "../../examples/api-keys.yaml", "../../examples/overload.yaml"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("rules: [{name: x, key: ip, limit: 0/min}]"))
	// Small files that reach one path each, so that the fuzzer starts from
	// them rather than minimising the examples (see make fuzz).
	for _, src := range []string{
		"upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n",
		"server: {listn: x, max_in_flight: many}\n",
		"server: [1]\nadmin: 5\nstore: {type: redis}\n",
		"store: {type: redis, url: 'redis://h:1/0', on_error: local, local_share: 0.5, timeout: 5ms, max_keys: -1}\n",
		"client_ip: {trusted_proxies: [10.0.0.0/8, x], header: X-Real-IP, ipv6_prefix: 48, ipv4_prefix: 40}\nidentity: {user_header: 'a b'}\n",
		"admin: {listen: 'off', token: t, token_env: T}\nheaders: {legacy: yes}\n",
		"upstreams: {a: {url: 'http://127.0.0.1:1', timeout: 1s, dial_timeout: x, preserve_host: true, max_idle_conns: -1, flush_interval: 1s}}\nroutes: [{name: r, upstream: a, strip_prefix: /api, match: {path: '/api/**', host: h, methods: [get], headers: {X-A: b}}}]\n",
		"upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules:\n  - {name: a, key: 'header:X-Key+ip', limit: 10/s burst 20, algorithm: token-bucket, cost: 'header:X-Cost', mode: shadow}\n  - {name: a, kye: ip, limit: 5/10min, algorithm: leaky-queue, match: {path: /x/{id}}}\n",
		"base: &b {key: ip, limit: 1/s}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules: [{<<: *b, name: x}, {<<: [*b], name: y, limit: 2/s}]\n",
		"a: &a [x, x]\nrules: [*a, *a]\nroutes: *a\n",
		"rules:\n  - name: x\n    name: y\n    {a: b}: c\n",
		"- a\n- b\n",
		"",
		"server:\n\tlisten: x\n",
		"upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules:\n  - {name: c, key: ip, concurrency: {max: 2, ttl: 5s}, queue: {size: 3, timeout: 1s, order: lifo}, priority: sheddable}\n  - {name: s, key: ip, algorithm: leaky-queue, limit: 2/s burst 5, shape: {delay: 2, max_delay: 1s}}\n  - {name: p, priority: critical, match: {path: /x}}\noverload: {max_in_flight: 10, reserve: {critical: 2, default: 2}, queue: {size: 5, timeout: 1s, order: fifo}, shedding: fair, tenant: 'header:X-Tenant', deadline: 2s, service_time: 5ms, queue_delay_target: 10ms, latency_target: 1s, retry_after: 1s}\n",
		"server: {max_in_flight: 3}\noverload: {max_in_flight: x, reserve: 5}\nrules: [{name: q, concurrency: 1, queue: {}, shape: {}}]\n",
	} {
		f.Add([]byte(src))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse("fuzz.yaml", data)
		if err != nil {
			var es config.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v is not a non-empty Errors", err)
			}
			return
		}
		if c.Policy == nil || len(c.Routes) == 0 {
			t.Fatal("valid config without policy or routes")
		}
	})
}

func TestRequestHeaders(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(`
client_ip:
  trusted_proxies: [10.0.0.0/8]
identity:
  user_header: X-User
upstreams:
  app: {url: "http://127.0.0.1:9"}
routes:
  - {name: api, match: {headers: {X-Version: "2"}}, upstream: app}
rules:
  - {name: per-key, key: "header:x-api-key+ip", limit: 10/s}
  - {name: bytes, key: "header:X-API-Key", limit: 1000/s, cost: "header:X-Cost", match: {headers: {B: "*", A: "*"}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(cfg.RequestHeaders(), " ")
	if want := "X-Api-Key X-Cost A B X-Version X-User X-Forwarded-For"; got != want {
		t.Errorf("RequestHeaders() = %s, want %s", got, want)
	}
	// Only the key reads X-Api-Key: it is logged hashed.
	if got := strings.Join(cfg.HashedHeaders(), " "); got != "X-Api-Key" {
		t.Errorf("HashedHeaders() = %q, want X-Api-Key", got)
	}
	// The API-gateway model's rules read headers too: a stage's match, a
	// rate rule's custom keys and scope-down, a plan's routes, the API
	// key's header; a cookie part reads Cookie.
	cfg, err = config.Parse("t.yaml", []byte(`
upstreams:
  app: {url: "http://127.0.0.1:9"}
routes:
  - {upstream: app}
levels:
  stages:
    - {name: v2, match: {headers: {X-Stage: v2}}, rate: 100}
plans:
  basic: {rate: 10, routes: [{path: /pets/**, headers: {X-Plan-Route: "*"}}]}
api_keys:
  header: X-Key
  keys: [{id: a, plan: basic, sha256: ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad}]
rate_rules:
  - {name: per-client, limit: 100, aggregate: custom, keys: ["header:X-Client", "cookie:session"], scope_down: {headers: {X-Scope: "*"}}}
rules:
  - {name: per-session, key: "cookie:sid+query:page", limit: 10/s}
`))
	if err != nil {
		t.Fatal(err)
	}
	got = strings.Join(cfg.RequestHeaders(), " ")
	if want := "X-Stage X-Client Cookie X-Scope X-Plan-Route X-Key"; got != want {
		t.Errorf("RequestHeaders() of the gateway model = %s, want %s", got, want)
	}
	// X-Client is read by a key alone; X-Stage, X-Scope and X-Plan-Route
	// are matched on.
	if got := strings.Join(cfg.HashedHeaders(), " "); got != "X-Client" {
		t.Errorf("HashedHeaders() of the gateway model = %q, want X-Client", got)
	}
	if !cfg.Policy.ReadsQuery() {
		t.Error("Policy.ReadsQuery() = false for a key with a query part")
	}
	if got := cfg.Policy.ResponseHeaders(); len(got) != 0 || cfg.Policy.ReadsResponseBytes() {
		t.Errorf("ResponseHeaders() = %v, ReadsResponseBytes() = %v for rules whose costs read no response", got, cfg.Policy.ReadsResponseBytes())
	}
	// Costs from the response: the headers a log must keep to settle them.
	cfg, err = config.Parse("t.yaml", []byte(`
upstreams:
  app: {url: "http://127.0.0.1:9"}
routes:
  - {upstream: app}
rules:
  - {name: tokens, key: ip, limit: 1000/min, cost: "response-header:x-tokens-used", reserve: 10}
  - {name: more, key: ip, limit: 1000/min, cost: "response-header:X-Tokens-Used", reserve: 10}
  - {name: bytes, key: ip, limit: 100000/min, cost: response-bytes}
  - {name: logins, key: ip, limit: 5/min, count_responses: ["401"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Policy.ResponseHeaders(), " "); got != "X-Tokens-Used" || !cfg.Policy.ReadsResponseBytes() || cfg.Policy.ReadsQuery() {
		t.Errorf("ResponseHeaders() = %q, ReadsResponseBytes() = %v, ReadsQuery() = %v; want X-Tokens-Used, true, false",
			got, cfg.Policy.ReadsResponseBytes(), cfg.Policy.ReadsQuery())
	}
}
