package sameanswer_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/grpclimit"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/checkapi"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/grpctest"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/internal/rlsclient"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

// The rule, as Portero's policy and as envoyproxy/ratelimit's YAML: 5 per
// clock-aligned minute for each API key ("api"), and a shadow rule of 1 per
// minute ("dark") that must never refuse. The policy's paths are gRPC full
// method names, so that the HTTP middleware (GET /sameanswer.Edge/api) and
// the gRPC interceptors (a call of /sameanswer.Edge/api) match alike.
const envoyYAML = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {name: api, unit: minute, requests_per_unit: 5}
  - key: dark
    shadow_mode: true
    rate_limit: {name: dark, unit: minute, requests_per_unit: 1}
`

func portPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	cost, err := policy.ParseCost("header:X-Cost")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.New([]policy.Rule{
		{Name: "api", Match: policy.Match{Path: "/sameanswer.Edge/api"}, Key: policy.MustParseKey("header:X-Api-Key"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(5), Cost: cost},
		{Name: "dark", Match: policy.Match{Path: "/sameanswer.Edge/dark"}, Key: policy.MustParseKey("header:X-Api-Key"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1), Mode: policy.Shadow},
	}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// t0 is 10 s into a minute: 50 s to the end of the window.
var t0 = time.Unix(1_800_000_000, 0).Truncate(time.Minute).Add(10 * time.Second)

func now() time.Time { return t0 }

// answer is what a door says about one request, in the terms they share.
type answer struct {
	Allowed     bool
	NeverPasses bool   // refused as a request that can never pass
	Unavailable bool   // refused for the service's sake (503; deny)
	Policy      string // RateLimit-Policy
	RateLimit   string
	RetryAfter  string
}

func (a answer) String() string {
	return fmt.Sprintf("allowed=%v never=%v unavailable=%v policy=%q ratelimit=%q retry=%q", a.Allowed, a.NeverPasses, a.Unavailable, a.Policy, a.RateLimit, a.RetryAfter)
}

// request is one request to the rule: rule api or dark, a cost (0 for a
// check-only request, which the middleware cannot express).
type request struct {
	rule string
	cost int64
}

// door asks one request of one door.
type door interface {
	ask(t *testing.T, r request) answer
	name() string
	// expresses reports whether the door can ask r: the doors of
	// Portero's policy cannot ask a check-only request (cost 0), /v1/auth
	// any cost but 1.
	expresses(r request) bool
}

// middleware: the rule in httplimit, over real loopback HTTP; with a
// label, another door answering as the middleware does (the gateway).
type middleware struct{ url, label string }

func (d middleware) name() string { return cmp.Or(d.label, "middleware") }

func (middleware) expresses(r request) bool { return r.cost > 0 }

func (d middleware) ask(t *testing.T, r request) answer {
	t.Helper()
	req, _ := http.NewRequest("GET", d.url+"/sameanswer.Edge/"+r.rule, nil)
	req.Header.Set("X-Api-Key", "k")
	req.Header.Set("X-Cost", strconv.FormatInt(r.cost, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a := fromHeader(resp.Header)
	a.Allowed = resp.StatusCode == 200
	a.Unavailable = resp.StatusCode == 503
	if resp.StatusCode == 429 {
		a.NeverPasses = neverPasses(t, body)
	}
	return a
}

// grpcDoor: the rule in grpclimit's interceptors, over a real grpc-go
// server and client on loopback; the cost in x-cost metadata.
type grpcDoor struct{ cc *grpc.ClientConn }

func (grpcDoor) name() string { return "gRPC interceptor" }

func (grpcDoor) expresses(r request) bool { return r.cost > 0 }

func (d grpcDoor) ask(t *testing.T, r request) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", "k", "x-cost", strconv.FormatInt(r.cost, 10))
	var hdr, tr metadata.MD
	err := d.cc.Invoke(ctx, "/sameanswer.Edge/"+r.rule, wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Header(&hdr), grpc.Trailer(&tr))
	md := metadata.Join(hdr, tr)
	a := answer{Policy: strings.Join(md.Get("ratelimit-policy"), ", "), RateLimit: strings.Join(md.Get("ratelimit"), ", ")}
	st := status.Convert(err)
	switch st.Code() {
	case codes.OK:
		a.Allowed = true
	case codes.Unavailable:
		a.Unavailable = true
	case codes.ResourceExhausted:
	default:
		t.Fatalf("gRPC call: %v", err)
	}
	hasRetry := false
	for _, det := range st.Details() {
		switch det := det.(type) {
		case *errdetails.RetryInfo:
			hasRetry = true
			a.RetryAfter = strconv.FormatInt(int64(math.Ceil(det.GetRetryDelay().AsDuration().Seconds())), 10)
		case *errdetails.QuotaFailure:
			for _, v := range det.GetViolations() {
				a.NeverPasses = a.NeverPasses || strings.Contains(v.GetDescription(), "can never pass")
			}
		}
	}
	a.NeverPasses = a.NeverPasses && !hasRetry
	return a
}

// echo answers any method with its request: the service behind the gRPC
// door, whose rules name methods of no registered service.
func echo(_ any, ss grpc.ServerStream) error {
	m := new(wrapperspb.StringValue)
	if err := ss.RecvMsg(m); err != nil {
		return err
	}
	return ss.SendMsg(m)
}

// neverPasses reads a 429 problem body: true when it says the request can
// never pass (cost and max-cost, no retry-after).
func neverPasses(t *testing.T, body []byte) bool {
	t.Helper()
	var p httplimit.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	return p.MaxCost != nil && p.RetryAfter == 0 && strings.Contains(p.Detail, "can never pass")
}

func fromHeader(h http.Header) answer {
	return answer{Policy: h.Get("RateLimit-Policy"), RateLimit: h.Get("RateLimit"), RetryAfter: h.Get("Retry-After")}
}

// checkDomain: the rule as descriptors at /v1/check.
type checkDomain struct {
	url   string
	descs map[string][]string // each rule's descriptor keys (scenario.descriptors)
}

func (checkDomain) name() string { return "check API (domain)" }

func (checkDomain) expresses(request) bool { return true }

func (d checkDomain) ask(t *testing.T, r request) answer {
	var ds []string
	for _, key := range d.descs[r.rule] {
		ds = append(ds, fmt.Sprintf(`{"entries":[{"key":%q,"value":"k"}],"hits_addend":%d}`, key, r.cost))
	}
	return postCheck(t, d.url, `{"domain":"edge","descriptors":[`+strings.Join(ds, ",")+`]}`)
}

func postCheck(t *testing.T, url, body string) answer {
	t.Helper()
	resp, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a := fromHeader(resp.Header)
	switch resp.StatusCode {
	case 200:
		var out checkapi.CheckResponse
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		a.Allowed = out.Allowed
		// A deny decision of the failure policy: refused for the
		// service's sake.
		a.Unavailable = !out.Allowed && out.Degraded != ""
	case 429:
		a.NeverPasses = neverPasses(t, raw)
	default:
		t.Fatalf("/v1/check %s: %d %s", body, resp.StatusCode, raw)
	}
	return a
}

// envoy: the rule as descriptors over a real gRPC client.
type envoy struct {
	c         *rlsclient.Client
	transport rls.Transport
	descs     map[string][]string
	compat    bool // the compatibility mode
}

func (d envoy) name() string {
	if d.compat {
		return "Envoy RLS, compatibility mode (" + string(d.transport) + ")"
	}
	return "Envoy RLS (" + string(d.transport) + ")"
}

func (envoy) expresses(request) bool { return true }

func (d envoy) ask(t *testing.T, r request) answer {
	t.Helper()
	hits := uint64(r.cost)
	req := &descriptor.Request{Domain: "edge"}
	for _, key := range d.descs[r.rule] {
		req.Descriptors = append(req.Descriptors, descriptor.Descriptor{Entries: []descriptor.Entry{{Key: key, Value: "k"}}, Hits: &hits})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := d.c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	h := http.Header{}
	for _, hv := range out.Headers {
		h.Add(hv.Name, hv.Value)
	}
	a := fromHeader(h)
	a.Allowed = out.Code == descriptor.OK
	// Envoy has no statuses to say why: a refusal with no Retry-After is
	// one that can never pass; one whose limit the store did not decide
	// (no current_limit) is the failure policy's.
	if !a.Allowed {
		a.NeverPasses = a.RetryAfter == ""
		a.Unavailable = !a.NeverPasses && out.Statuses[0].Name == ""
	}
	return a
}

// scenario is what every door is given: Portero's rules (for the
// middleware and the gRPC door), the same as a configuration file (for the
// gateway) and as envoyproxy/ratelimit's descriptors (for /v1/check,
// /v1/auth and the RLS), the descriptor keys each rule's requests carry,
// and the clock.
type scenario struct {
	rules       func(t *testing.T) *policy.Policy
	shapes      map[string]overload.Shape
	gatewayYAML string
	envoyYAML   string
	descriptors map[string][]string
	now         func() time.Time
	// auth adds /v1/auth, which counts one per request: for scenarios of
	// cost-1 requests.
	auth bool
}

// basic is the rule of TestSameAnswer (api, and the shadow rule dark).
var basic = scenario{
	rules: portPolicy,
	gatewayYAML: `
rules:
  - {name: api, match: {path: /sameanswer.Edge/api}, key: "header:X-Api-Key", algorithm: fixed-window, limit: 5/min, cost: "header:X-Cost"}
  - {name: dark, match: {path: /sameanswer.Edge/dark}, key: "header:X-Api-Key", algorithm: fixed-window, limit: 1/min, mode: shadow}
`,
	envoyYAML:   envoyYAML,
	descriptors: map[string][]string{"api": {"api_key"}, "dark": {"dark"}},
	now:         now,
}

// doors starts every door over stores from open (one each, so that their
// counts are apart), with failure policy pol for the HTTP doors and the
// RLS alike.
func doors(t *testing.T, open func() portero.Store, pol portero.FailurePolicy) []door {
	t.Helper()
	return doorsFor(t, basic, open, pol)
}

// doorsFor starts every door of sc: those of Portero's policy (the
// middleware, the gateway, and the gRPC door unless sc shapes a queue)
// unless pol is FailError, which they refuse, and, when sc has
// descriptors, those of envoyproxy/ratelimit's (/v1/check, /v1/auth, the
// RLS on both of its transports).
func doorsFor(t *testing.T, sc scenario, open func() portero.Store, pol portero.FailurePolicy) []door {
	t.Helper()
	p := sc.rules(t)
	quiet := slog.New(slog.DiscardHandler)
	var out []door

	if pol != portero.FailError {
		l, err := httplimit.New(httplimit.Config{Policy: p, Store: open(), Now: sc.now, OnStoreError: pol, Shapes: sc.shapes})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
		t.Cleanup(srv.Close)
		out = append(out, middleware{url: srv.URL}, gatewayDoor(t, sc, open(), pol))
	}
	if pol != portero.FailError && sc.shapes == nil { // the gRPC door has no shapes
		gl, err := grpclimit.New(grpclimit.Config{Policy: p, Store: open(), Now: sc.now, OnStoreError: pol})
		if err != nil {
			t.Fatal(err)
		}
		addr := grpctest.Start(t, grpctest.Handlers{}, grpc.UnknownServiceHandler(echo), grpc.ChainStreamInterceptor(gl.Stream))
		out = append(out, grpcDoor{grpctest.Dial(t, addr)})
	}
	if sc.envoyYAML == "" { // a scenario descriptors cannot say
		return out
	}
	lim, err := envoyconf.Parse([]envoyconf.Source{{Name: "edge.yaml", Data: []byte(sc.envoyYAML)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}

	checkDoor := func(st portero.Store) *httptest.Server {
		e, err := engine.New(engine.Options{Store: st, OnError: cmpOr(pol, portero.FailError)})
		if err != nil {
			t.Fatal(err)
		}
		h, err := checkapi.New(checkapi.Config{Compiler: descriptor.NewCompiler(lim, descriptor.Options{}), Engine: e, Now: sc.now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv
	}
	out = append(out, checkDomain{checkDoor(open()).URL, sc.descriptors})
	if sc.auth {
		out = append(out, auth{checkDoor(open()).URL, sc.descriptors})
	}

	// The RLS on both of its transports, each over a store of its own.
	for _, tr := range []rls.Transport{rls.TransportGRPC, rls.TransportLean} {
		e, err := engine.New(engine.Options{Store: open(), OnError: cmpOr(pol, portero.FailError)})
		if err != nil {
			t.Fatal(err)
		}
		svc := rls.NewService(descriptor.NewCompiler(lim, descriptor.Options{}), e, rls.ServiceOptions{Now: sc.now, Logger: quiet})
		out = append(out, envoy{c: serveRLS(t, svc, tr), transport: tr, descs: sc.descriptors})
	}
	return out
}

// serveRLS serves svc on transport tr on loopback until the test ends and
// returns a client of it.
func serveRLS(t *testing.T, svc *rls.Service, tr rls.Transport) *rlsclient.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rls.Serve(ctx, lis, svc, rls.ServerOptions{Transport: tr, ShutdownGrace: time.Second}) }()
	c, err := rlsclient.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("rls.Serve (%s): %v", tr, err)
		}
	})
	return c
}

func cmpOr(a, b portero.FailurePolicy) portero.FailurePolicy {
	if a != "" {
		return a
	}
	return b
}

func memStores(t *testing.T) func() portero.Store {
	return func() portero.Store {
		st, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		return st
	}
}

// askAll asks every door the same request and fails unless they answer
// alike; it returns the common answer. Doors that cannot express the
// request (door.expresses) are left out.
func askAll(t *testing.T, ds []door, r request) answer {
	t.Helper()
	var first answer
	var firstName string
	for _, d := range ds {
		if !d.expresses(r) {
			continue
		}
		a := d.ask(t, r)
		if firstName == "" {
			first, firstName = a, d.name()
			continue
		}
		if a != first {
			t.Errorf("%+v: %s says\n  %v\nbut %s says\n  %v", r, d.name(), a, firstName, first)
		}
	}
	return first
}

// TestSameAnswer feeds one rule through every door and compares: check-only,
// a cost that can never pass, the limit spent, the refusal, and a shadow
// rule that never refuses.
func TestSameAnswer(t *testing.T) {
	ds := doors(t, memStores(t), "")
	for i, step := range []struct {
		r    request
		want answer
	}{
		{request{"api", 0}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=5;t=0`}}, // check-only: nothing counted
		{request{"api", 6}, answer{NeverPasses: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=5;t=0`}},
		{request{"api", 1}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=4;t=50`}},
		{request{"api", 3}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=1;t=50`}},
		{request{"api", 1}, answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`}},
		{request{"api", 1}, answer{Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`, RetryAfter: "50"}},
		{request{"api", 0}, answer{Policy: `"api";q=5;w=60`, RateLimit: `"api";r=0;t=50`, RetryAfter: "50"}}, // check-only, spent
		{request{"dark", 1}, answer{Allowed: true}},                                                          // shadow: counted, never announced
		{request{"dark", 1}, answer{Allowed: true}},                                                          // over its limit, still allowed
		{request{"dark", 5}, answer{Allowed: true}},                                                          // can never pass, but shadow
	} {
		if got := askAll(t, ds, step.r); got != step.want {
			t.Errorf("step %d %+v: every door says\n  %v\nwant\n  %v", i, step.r, got, step.want)
		}
	}
}

// TestSameFailurePolicies stops a real redis-server behind every door and
// checks that each failure policy answers alike at every door: deny
// refuses everywhere (a setting named fail-closed never fails open), allow
// lets everything through without made-up RateLimit values, error is an
// error to the caller of the doors that have one.
func TestSameFailurePolicies(t *testing.T) {
	srv := redistest.Start(t)
	var mu sync.Mutex
	n := 0
	open := func() portero.Store {
		mu.Lock()
		n++
		prefix := fmt.Sprintf("door%d:", n)
		mu.Unlock()
		st, err := redisstore.New(redisstore.Config{URL: srv.URL(), Prefix: prefix, Clock: redisstore.CallerClock, Timeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		return st
	}
	sc := basic
	sc.auth = true
	// Each policy's doors with the compatibility mode's, which counts as
	// envoyproxy/ratelimit does (a cost that can never pass is counted
	// there): compatN leaves them out.
	var doorsOf [4][]door
	const compatN = 2
	for i, pol := range []portero.FailurePolicy{portero.FailDeny, portero.FailAllow, portero.FailLocal, portero.FailError} {
		doorsOf[i] = append(compatDoors(t, sc, open, pol), doorsFor(t, sc, open, pol)...)
	}
	deny, allow, local, errs := doorsOf[0], doorsOf[1], doorsOf[2], doorsOf[3]
	// Healthy: the same answer as with the memory store.
	want := answer{Allowed: true, Policy: `"api";q=5;w=60`, RateLimit: `"api";r=4;t=50`}
	for _, ds := range [][]door{deny, allow, local, errs} {
		if got := askAll(t, ds, request{"api", 1}); got != want {
			t.Errorf("Redis up: %v, want %v", got, want)
		}
	}
	srv.Kill()
	t.Cleanup(srv.Restart)
	if got, want := askAll(t, deny, request{"api", 1}), (answer{Unavailable: true, Policy: `"api";q=5;w=60`, RetryAfter: "1"}); got != want {
		t.Errorf("deny with Redis down: %v, want %v", got, want)
	}
	if got, want := askAll(t, allow, request{"api", 1}), (answer{Allowed: true, Policy: `"api";q=5;w=60`}); got != want {
		t.Errorf("allow with Redis down: %v, want %v", got, want)
	}
	if got, want := askAll(t, local, request{"api", 1}), (answer{Allowed: true, Policy: `"api";q=5;w=60`}); got != want {
		t.Errorf("local with Redis down: %v, want %v", got, want)
	}
	// A cost that can never pass is refused under every policy, and says so.
	for _, ds := range [][]door{deny[compatN:], allow[compatN:], local[compatN:]} {
		if got := askAll(t, ds, request{"api", 6}); !got.NeverPasses || got.Allowed || got.RetryAfter != "" {
			t.Errorf("cost 6 of 5 with Redis down: %v, want a refusal that can never pass", got)
		}
	}
	// error: the check API and /v1/auth answer 503 and the RLS
	// UNAVAILABLE; the doors of Portero's policy refuse the setting
	// (TestStoreFailure in httplimit).
	for _, d := range errs {
		switch d := d.(type) {
		case checkDomain:
			body := `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"k"}]}]}`
			resp, err := http.Post(d.url+"/v1/check", "application/json", bytes.NewReader([]byte(body)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 {
				t.Errorf("%s under error with Redis down: %d, want 503", d.name(), resp.StatusCode)
			}
		case auth:
			resp, err := http.Get(d.url + "/v1/auth?domain=edge&descriptor=api_key=k")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 {
				t.Errorf("%s under error with Redis down: %d, want 503", d.name(), resp.StatusCode)
			}
		case envoy:
			hits := uint64(1)
			_, err := d.c.ShouldRateLimit(context.Background(), &descriptor.Request{Domain: "edge", Descriptors: []descriptor.Descriptor{{Entries: []descriptor.Entry{{Key: "api_key", Value: "k"}}, Hits: &hits}}})
			if err == nil || !strings.Contains(err.Error(), "Unavailable") {
				t.Errorf("%s under error with Redis down: %v, want UNAVAILABLE", d.name(), err)
			}
		}
	}
}
