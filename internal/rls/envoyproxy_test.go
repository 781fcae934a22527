package rls

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/rlscache"
	"github.com/portero-rl/portero/store/redisstore"
)

// The port of envoyproxy/ratelimit's integration scenarios: each file of
// testdata/envoyproxy is a scenario (its configuration files, its
// envoyproxy/ratelimit settings, and requests with the exact answers),
// written for Portero from that project's test/integration,
// integration-test scripts and service tests, and checked against a
// running envoyproxy/ratelimit (docs/envoy.md says how). Every answer
// must be protobuf-equal (proto.Equal on the whole RateLimitResponse),
// at the scenario's instants on a controlled clock, on the memory store
// and on Redis, on both gRPC transports and through /json.

type scenario struct {
	Start    time.Time           `yaml:"start"`
	Env      map[string]string   `yaml:"env"`
	Variants []map[string]string `yaml:"variants"`
	Files    map[string]*string  `yaml:"files"`
	Steps    []scenarioStep      `yaml:"steps"`
}

type scenarioStep struct {
	At      string             `yaml:"at"`
	Note    string             `yaml:"note"`
	Files   map[string]*string `yaml:"files"`
	Request any                `yaml:"request"`
	Times   int                `yaml:"times"`
	// GRPCOnly steps are not sent through /json (a field the API
	// envoyproxy/ratelimit builds with lacks, which its /json refuses).
	GRPCOnly bool `yaml:"grpc_only"`
	Response any  `yaml:"response"`
	Error    *struct {
		Code    string `yaml:"code"`
		Message string `yaml:"message"`
	} `yaml:"error"`
	// Redis, on the Redis store, is every key of Redis after the step
	// with its value (the per-second Redis's under REDIS_PERSECOND in
	// RedisPerSecond); each key's TTL must be within its window.
	Redis          map[string]string `yaml:"redis"`
	RedisPerSecond map[string]string `yaml:"redis_per_second"`
	// Probe asks the server beside the service (gRPC health, the debug
	// port; Want is the answer): scripts/envoyproxy-oracle.py runs them
	// on both binaries, this test leaves them to internal/server's.
	Probe map[string]any `yaml:"probe"`
	Want  any            `yaml:"want"`
}

// compatSettings are the envoyproxy/ratelimit settings a scenario may set,
// as the service, the compiler and the engine take them (cmd/portero maps
// the same variables onto its flags).
type compatSettings struct {
	compat   Compat
	compile  descriptor.Options
	engine   engine.Options
	load     envoyconf.Options
	prefixed bool
	// localCache is LOCAL_CACHE_SIZE_IN_BYTES; perSecond REDIS_PERSECOND.
	localCache int
	perSecond  bool
}

func settingsOf(t *testing.T, env map[string]string) compatSettings {
	t.Helper()
	s := compatSettings{
		compat:  Compat{Headers: HeadersNone},
		compile: descriptor.Options{Envoyproxy: true},
		engine:  engine.Options{Counting: engine.CountEach, OnError: portero.FailError},
		load:    envoyconf.Options{Envoyproxy: true},
	}
	on := func(k string) bool {
		b, err := strconv.ParseBool(env[k])
		if err != nil {
			t.Fatalf("%s=%q: %v", k, env[k], err)
		}
		return b
	}
	for k, v := range env {
		switch k {
		case "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT":
			s.engine.StopIncrementWhenOver = on(k)
		case "CACHE_KEY_PREFIX":
			s.compile.KeyPrefix = v
		case "LOCAL_CACHE_SIZE_IN_BYTES":
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s=%q: %v", k, v, err)
			}
			s.localCache = n
		case "REDIS_PERSECOND":
			s.perSecond = on(k)
		case "SHADOW_MODE":
			s.engine.ShadowAll = on(k)
		case "QUOTA_MODE":
			s.load.QuotaMode = on(k)
			s.compile.QuotaMode = on(k)
		case "MERGE_DOMAIN_CONFIG":
			s.load.MergeDomains = on(k)
		case "RESPONSE_DYNAMIC_METADATA":
			s.compat.Metadata = on(k)
		case "LIMIT_RESPONSE_HEADERS_ENABLED":
			if on(k) {
				s.compat.Headers = HeadersEnvoyproxy
			}
		case "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY",
			"GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN":
			// The server's, asked by probe steps.
		case "LIMIT_LIMIT_HEADER":
			s.compat.HeaderNames[0] = v
		case "LIMIT_REMAINING_HEADER":
			s.compat.HeaderNames[1] = v
		case "LIMIT_RESET_HEADER":
			s.compat.HeaderNames[2] = v
		default:
			t.Fatalf("scenario setting %s: not known to this test", k)
		}
	}
	return s
}

// scenarioDoor is one run of a scenario: a service over a store, served on
// a real gRPC server of one transport and through /json.
type scenarioDoor struct {
	dir      string
	clock    *clock
	compiler *descriptor.Compiler
	load     envoyconf.Options
	client   pb.RateLimitServiceClient
	json     string // the /json URL
	// redis are the Redis servers of the store: none for the memory
	// store, the per-second one second.
	redis []*redistest.Server
}

func (d *scenarioDoor) reload(t *testing.T) {
	t.Helper()
	c, err := envoyconf.Load(d.dir, d.load)
	if err != nil {
		t.Logf("reload refused (the running configuration stays): %v", err)
		return
	}
	d.compiler.SetLimits(c)
}

func writeScenarioFiles(t *testing.T, dir string, files map[string]*string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if content == nil {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(*content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func startScenario(t *testing.T, sc *scenario, set compatSettings, st portero.Store, transport string) *scenarioDoor {
	t.Helper()
	d := &scenarioDoor{dir: t.TempDir(), clock: &clock{now: sc.Start}, load: set.load}
	writeScenarioFiles(t, d.dir, sc.Files)
	set.engine.Store = st
	if set.localCache > 0 {
		set.engine.OverLimitCache = rlscache.New(set.localCache, d.clock.Now)
	}
	eng, err := engine.New(set.engine)
	if err != nil {
		t.Fatal(err)
	}
	d.compiler = descriptor.NewCompiler(nil, set.compile)
	d.reload(t) // a configuration that fails leaves none loaded
	compat := set.compat
	svc := NewService(d.compiler, eng, ServiceOptions{Compat: &compat, Now: d.clock.Now})
	conn := serveSvc(t, svc, ServerOptions{Transport: Transport(transport)}, nil, "")
	hs := httptest.NewServer(svc.JSONHandler())
	t.Cleanup(hs.Close)
	d.client, d.json = pb.NewRateLimitServiceClient(conn), hs.URL+"/json"
	return d
}

// toJSON turns a YAML value of a scenario into JSON for protojson.
func toJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadScenarios(t *testing.T) map[string]*scenario {
	t.Helper()
	paths, err := filepath.Glob("testdata/envoyproxy/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	out := map[string]*scenario{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var sc scenario
		if err := yaml.Unmarshal(data, &sc); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".yaml")] = &sc
	}
	return out
}

// TestEnvoyproxyScenarios runs every scenario, in each of its variants,
// on the memory store and on a real redis-server, over both gRPC
// transports and through /json: every answer protobuf-equal to
// envoyproxy/ratelimit's.
func TestEnvoyproxyScenarios(t *testing.T) {
	scenarios := loadScenarios(t)
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	srv, second := redistest.Start(t), redistest.Start(t) // second: REDIS_PERSECOND's
	stores := map[string]func(t *testing.T, set compatSettings) (portero.Store, []*redistest.Server){
		"memory": func(t *testing.T, _ compatSettings) (portero.Store, []*redistest.Server) { return newMemStore(t), nil },
		"redis": func(t *testing.T, set compatSettings) (portero.Store, []*redistest.Server) {
			servers := []*redistest.Server{srv}
			if set.perSecond {
				servers = append(servers, second)
			}
			var sts []*redisstore.Store
			for _, s := range servers {
				if _, err := redistest.Do(s.Addr(), "FLUSHALL"); err != nil {
					t.Fatal(err)
				}
				st, err := redisstore.New(redisstore.Config{URL: s.URL(), Timeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				sts = append(sts, st)
			}
			if !set.perSecond {
				t.Cleanup(func() { sts[0].Close(context.Background()) })
				return sts[0], servers
			}
			ps := redisstore.NewPerSecond(sts[0], sts[1])
			t.Cleanup(func() { ps.Close(context.Background()) })
			return ps, servers
		},
	}
	checked := 0
	for _, storeName := range []string{"memory", "redis"} {
		t.Run(storeName, func(t *testing.T) {
			for _, name := range names {
				sc := scenarios[name]
				variants := sc.Variants
				if len(variants) == 0 {
					variants = []map[string]string{{}}
				}
				for vi, v := range variants {
					env := map[string]string{}
					for k, x := range sc.Env {
						env[k] = x
					}
					for k, x := range v {
						env[k] = x
					}
					for _, via := range []string{"grpc-go", "lean", "json"} {
						t.Run(name+"/"+strconv.Itoa(vi)+"/"+via, func(t *testing.T) {
							tr := via
							if via == "json" {
								tr = "grpc-go"
							}
							set := settingsOf(t, env)
							st, servers := stores[storeName](t, set)
							d := startScenario(t, sc, set, st, tr)
							d.redis = servers
							checked += runScenario(t, sc, d, via == "json")
						})
					}
				}
			}
		})
	}
	if checked < 2000 {
		t.Errorf("%d answers checked: the scenarios went missing", checked)
	}
}

// runScenario plays sc against d, over gRPC or through /json, and returns
// the number of answers checked.
func runScenario(t *testing.T, sc *scenario, d *scenarioDoor, viaJSON bool) int {
	t.Helper()
	checked := 0
	at := time.Duration(0)
	for i, step := range sc.Steps {
		if step.At != "" {
			x, err := time.ParseDuration(step.At)
			if err != nil {
				t.Fatalf("step %d: at %q: %v", i, step.At, err)
			}
			at = x
		}
		d.clock.mu.Lock()
		d.clock.now = sc.Start.Add(at)
		d.clock.mu.Unlock()
		if step.Files != nil {
			writeScenarioFiles(t, d.dir, step.Files)
			d.reload(t)
			continue
		}
		if step.Probe != nil {
			continue
		}
		raw := toJSON(t, step.Request)
		var req pb.RateLimitRequest
		protoErr := protojson.Unmarshal(raw, &req)
		var want *pb.RateLimitResponse
		if step.Response != nil {
			want = new(pb.RateLimitResponse)
			if err := protojson.Unmarshal(toJSON(t, step.Response), want); err != nil {
				t.Fatalf("step %d: response: %v", i, err)
			}
		}
		where := "step " + strconv.Itoa(i) + " (" + step.Note + ")"
		if step.GRPCOnly && viaJSON {
			continue
		}
		if protoErr != nil && (step.Error == nil || !viaJSON) {
			// Not a RateLimitRequest at all (an enum value Envoy's
			// protocol lacks): only /json can carry it, to be refused.
			if step.Error == nil {
				t.Fatalf("%s: request: %v", where, protoErr)
			}
			continue
		}
		for k := 0; k < max(step.Times, 1); k++ {
			checked++
			if viaJSON {
				checkJSON(t, where, d.json, raw, want, step.Error != nil)
				continue
			}
			resp, err := d.client.ShouldRateLimit(context.Background(), &req)
			switch {
			case step.Error != nil:
				st := status.Convert(err)
				if err == nil || st.Code().String() != step.Error.Code || step.Error.Message != "" && st.Message() != step.Error.Message {
					t.Errorf("%s: %s: error %v, want %s: %q", where, raw, err, step.Error.Code, step.Error.Message)
				}
			case err != nil:
				t.Errorf("%s: %s: %v", where, raw, err)
			case !proto.Equal(resp, want):
				t.Errorf("%s: %s:\n got  %s\n want %s", where, raw, protojson.Format(resp), protojson.Format(want))
			}
		}
		for k, keys := range []map[string]string{step.Redis, step.RedisPerSecond} {
			if keys != nil && k < len(d.redis) {
				checkRedis(t, where, d.redis[k], keys)
			}
		}
	}
	return checked
}

// checkRedis compares every key of srv and its value with want, and
// checks that each one expires.
func checkRedis(t *testing.T, where string, srv *redistest.Server, want map[string]string) {
	t.Helper()
	reply, err := redistest.Do(srv.Addr(), "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, k := range strings.Fields(reply) {
		if got[k], err = redistest.Do(srv.Addr(), "GET", k); err != nil {
			t.Fatal(err)
		}
		if ttl, err := redistest.Do(srv.Addr(), "TTL", k); err != nil || ttl == "-1" {
			t.Errorf("%s: redis %s: key %s has no expiry (%v)", where, srv.Addr(), k, err)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s: redis %s holds\n %v\nwant\n %v", where, srv.Addr(), got, want)
	}
}

// checkJSON posts raw to /json: when bad, the answer must be 400 "Bad
// Request", as envoyproxy/ratelimit answers every error there; otherwise
// want, with 200, or 429 when it is OVER_LIMIT.
func checkJSON(t *testing.T, where, url string, raw []byte, want *pb.RateLimitResponse, bad bool) {
	t.Helper()
	r, err := http.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	if bad {
		if r.StatusCode != http.StatusBadRequest || string(body) != "Bad Request\n" {
			t.Errorf("%s: /json %s = %d %q, want 400 \"Bad Request\\n\"", where, raw, r.StatusCode, body)
		}
		return
	}
	code := http.StatusOK
	if want.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		code = http.StatusTooManyRequests
	}
	var got pb.RateLimitResponse
	if err := protojson.Unmarshal(body, &got); err != nil || r.StatusCode != code || r.Header.Get("Content-Type") != "application/json" || !proto.Equal(&got, want) {
		t.Errorf("%s: /json %s = %d %s %s (%v), want %d %s", where, raw, r.StatusCode, r.Header.Get("Content-Type"), body, err, code, protojson.Format(want))
	}
}

// TestCompatImprovements: each of Portero's improvements is one setting
// away from the compatibility mode, and changes only what it says.
func TestCompatImprovements(t *testing.T) {
	const file = `domain: d
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 2}
`
	sc := &scenario{Start: time.Unix(1_772_445_605, 250_000_000), Files: map[string]*string{"d.yaml": ptr(file)}}
	ask := func(t *testing.T, d *scenarioDoor, hits uint32) *pb.RateLimitResponse {
		t.Helper()
		resp, err := d.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", HitsAddend: hits, Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "ip", Value: "1"}}}, {Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	remaining := func(r *pb.RateLimitResponse) [2]uint32 {
		return [2]uint32{r.Statuses[0].LimitRemaining, r.Statuses[1].LimitRemaining}
	}
	t.Run("compat", func(t *testing.T) {
		d := startScenario(t, sc, settingsOf(t, nil), newMemStore(t), "grpc-go")
		ask(t, d, 3) // user over: 3 > 2, refused, both counted
		if got := remaining(ask(t, d, 1)); got != [2]uint32{1, 0} {
			t.Errorf("after a refused request: remaining %v, want [1 0] (it consumed)", got)
		}
	})
	t.Run("--counting all-or-nothing", func(t *testing.T) {
		set := settingsOf(t, nil)
		set.engine.Counting = engine.AllOrNothing
		d := startScenario(t, sc, set, newMemStore(t), "grpc-go")
		if r := ask(t, d, 3); r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("3 hits on 2: %v", r)
		}
		if got := remaining(ask(t, d, 1)); got != [2]uint32{4, 1} {
			t.Errorf("after a refused request: remaining %v, want [4 1] (it counted nothing)", got)
		}
	})
	t.Run("--reset exact", func(t *testing.T) {
		set := settingsOf(t, nil)
		set.compat.ExactReset = true
		d := startScenario(t, sc, set, newMemStore(t), "grpc-go")
		if got, want := ask(t, d, 1).Statuses[0].DurationUntilReset.AsDuration(), 54750*time.Millisecond; got != want {
			t.Errorf("duration_until_reset = %v, want %v", got, want)
		}
	})
	t.Run("rate_limit.portero", func(t *testing.T) {
		bucket := strings.Replace(file, "{name: per_user, unit: minute, requests_per_unit: 2}",
			"{name: per_user, unit: minute, requests_per_unit: 2, portero: {algorithm: token-bucket}}", 1)
		d := startScenario(t, &scenario{Start: sc.Start, Files: map[string]*string{"d.yaml": &bucket}}, settingsOf(t, nil), newMemStore(t), "grpc-go")
		ask(t, d, 2)
		r := ask(t, d, 1) // the bucket is empty: refused there, not taken; ip counts as envoyproxy/ratelimit counts
		if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT || r.Statuses[1].Code != pb.RateLimitResponse_OVER_LIMIT || remaining(r) != [2]uint32{2, 0} {
			t.Errorf("a token bucket beside an envoyproxy counter: %v", r)
		}
	})
	t.Run("--headers ietf", func(t *testing.T) {
		set := settingsOf(t, nil)
		set.compat.Headers = HeadersIETF
		d := startScenario(t, sc, set, newMemStore(t), "grpc-go")
		r := ask(t, d, 1)
		var names []string
		for _, h := range r.ResponseHeadersToAdd {
			names = append(names, h.Key+": "+h.Value)
		}
		if got := strings.Join(names, "\n"); !strings.Contains(got, `RateLimit-Policy: "d.ip";q=5;w=60, "per_user";q=2;w=60`) || !strings.Contains(got, "RateLimit: ") {
			t.Errorf("headers:\n%s", got)
		}
		// The rest stays envoyproxy/ratelimit's: no name for an unnamed limit.
		if r.Statuses[0].CurrentLimit.Name != "" || r.Statuses[1].CurrentLimit.Name != "per_user" {
			t.Errorf("names %q, %q", r.Statuses[0].CurrentLimit.Name, r.Statuses[1].CurrentLimit.Name)
		}
		// A refusal tells the client when to come back: per_user's window
		// ends in 54.75 s, Retry-After rounds up.
		r = ask(t, d, 2)
		var retry []string
		for _, h := range r.ResponseHeadersToAdd {
			if h.Key == "Retry-After" {
				retry = append(retry, h.Value)
			}
		}
		if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT || strings.Join(retry, ",") != "55" {
			t.Errorf("a refusal under --headers ietf: %s, Retry-After %q; want OVER_LIMIT and 55", r.OverallCode, retry)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestDumpConfig: /rlconfig prints what envoyproxy/ratelimit's
// rateLimitDescriptor.dump prints: a line per descriptor with a
// rate_limit, its own shadow_mode and quota_mode (not QUOTA_MODE's, which
// applies at decision time there), unlimited ones with unit UNKNOWN, tree
// by tree.
func TestDumpConfig(t *testing.T) {
	const file = `domain: d
descriptors:
  - key: a
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 3}
    descriptors:
      - key: b
        value: x
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 7, name: named}
      - key: free
        rate_limit: {unlimited: true}
      - key: free2
        rate_limit: {unlimited: true, requests_per_unit: 5}
  - key: nolimit
    descriptors:
      - key: c
        rate_limit: {unit: day, requests_per_unit: 1}
`
	want := "d.a: unit=SECOND requests_per_unit=3, shadow_mode: true, quota_mode: false\n" +
		"d.a.b_x: unit=HOUR requests_per_unit=7, shadow_mode: false, quota_mode: true\n" +
		"d.a.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n" +
		"d.a.free2: unit=UNKNOWN requests_per_unit=5, shadow_mode: false, quota_mode: false\n" +
		"d.nolimit.c: unit=DAY requests_per_unit=1, shadow_mode: false, quota_mode: false\n"
	for _, global := range []bool{false, true} {
		cfg, err := envoyconf.Parse([]envoyconf.Source{{Name: "d.yaml", Data: []byte(file)}}, envoyconf.Options{Envoyproxy: true, QuotaMode: global})
		if err != nil {
			t.Fatal(err)
		}
		if got := DumpConfig(cfg); got != want {
			t.Errorf("QUOTA_MODE %v: DumpConfig =\n%s want\n%s", global, got, want)
		}
	}
}

// TestCounterJitter: EXPIRATION_JITTER_MAX_SECONDS (engine CounterJitter)
// adds a random time below it to each Redis counter's expiry, as
// envoyproxy/ratelimit does so that counters made together do not all
// expire together; without it each lives one window.
func TestCounterJitter(t *testing.T) {
	srv := redistest.Start(t)
	const file = "domain: j\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	sc := &scenario{Start: time.Unix(1_772_445_605, 250_000_000), Files: map[string]*string{"j.yaml": ptr(file)}}
	for _, jitter := range []time.Duration{0, 300 * time.Second} {
		if _, err := redistest.Do(srv.Addr(), "FLUSHALL"); err != nil {
			t.Fatal(err)
		}
		st, err := redisstore.New(redisstore.Config{URL: srv.URL(), Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		set := settingsOf(t, nil)
		set.engine.CounterJitter = jitter
		d := startScenario(t, sc, set, st, "grpc-go")
		const n = 20
		lo, hi, longer := int64(1<<62), int64(0), 0
		for i := 0; i < n; i++ {
			v := "v" + strconv.Itoa(i)
			if _, err := d.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "j", Descriptors: []*commonv3.RateLimitDescriptor{
				{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: v}}}}}); err != nil {
				t.Fatal(err)
			}
			reply, err := redistest.Do(srv.Addr(), "TTL", "j_k_"+v+"_1772445600")
			if err != nil {
				t.Fatal(err)
			}
			ttl, err := strconv.ParseInt(reply, 10, 64)
			if err != nil {
				t.Fatalf("TTL %s: %q", v, reply)
			}
			lo, hi = min(lo, ttl), max(hi, ttl)
			if ttl > 60 {
				longer++
			}
		}
		st.Close(context.Background())
		switch {
		case jitter == 0 && (lo < 59 || hi > 60):
			t.Errorf("no jitter: TTLs from %d to %d s, want one minute", lo, hi)
		case jitter > 0 && (lo < 59 || hi > 360 || longer < n/2):
			// 20 draws below 300 s: fewer than 10 above 1 s has odds below 1e-20.
			t.Errorf("jitter %v: TTLs from %d to %d s, %d of %d above a minute; want 59 to 360, most above", jitter, lo, hi, longer, n)
		}
	}
}
