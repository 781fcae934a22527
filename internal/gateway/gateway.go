// Package gateway is Portero's reverse proxy (`portero serve`): the
// httplimit middleware in front of httputil.ReverseProxy to the upstreams a
// configuration names per route, with /healthz, /readyz, the API-gateway
// model (API keys, plans, GET /v1/limits) and, outermost, the overload
// section's load shedding (httplimit.Shedder over an overload.Gate, the
// gateway's one in-flight cap). Update replaces its configuration all at
// once or not at all; a reload that changes the overload section builds a
// new Gate for the requests after it, while those in the old one keep
// their places there until they finish.
package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/httpanswer"
	"github.com/portero-rl/portero/internal/quote"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// Hooks observe the gateway; nil fields do nothing. They must be fast and
// safe for concurrent use.
type Hooks struct {
	// OnDecision is called after every decision (httplimit.Config).
	OnDecision func(r *http.Request, v *engine.Verdict, storeTime time.Duration)
	// OnError is called when a request could not be decided.
	OnError func(r *http.Request, err error)
	// OnProxyError is called when an upstream did not answer properly.
	OnProxyError func(r *http.Request, upstream string, err error)
	// OnRoute is called with the route and upstream a request matched
	// (empty when none), before the limiter decides.
	OnRoute func(r *http.Request, route, upstream string)
	// Now is the clock of the limiter; nil means time.Now.
	Now func() time.Time
	// Ready, when set, decides what /readyz answers instead of SetReady:
	// nil for 200, or the reason for a 503.
	Ready func() error
	// OnShed is called for every request the overload section refuses.
	OnShed func(r *http.Request, ref *overload.Refusal)
	// OnAnswered is called, instead of OnRoute and OnDecision, when the
	// gateway answers a request itself before the limiter (an Answered*
	// value but AnsweredProbe).
	OnAnswered func(r *http.Request, why string)
}

// Gateway is an http.Handler. It is safe for concurrent use.
type Gateway struct {
	hooks   Hooks
	limiter *httplimit.Limiter
	table   atomic.Pointer[table]
	ready   atomic.Bool
}

type table struct {
	cfg      *config.Config
	routes   []*route
	shed     *httplimit.Shedder // nil when the overload section is off
	keyField string             // cfg.Gateway.KeyHeader, canonical
	served   http.Handler       // g.serve over this table, for shed, built once
}

type route struct {
	cfg     *config.RouteConfig
	handler http.Handler
	closer  func() // closes idle upstream connections
}

// New builds a gateway for cfg, counting in store (which the caller owns and
// closes). It starts not ready; call SetReady(true) once listening.
func New(cfg *config.Config, store portero.Store, hooks Hooks) (*Gateway, error) {
	g := &Gateway{hooks: hooks}
	t, err := g.build(cfg, nil)
	if err != nil {
		return nil, err
	}
	lcfg := g.limiterConfig(cfg, store)
	if g.limiter, err = httplimit.New(lcfg); err != nil {
		return nil, err
	}
	g.table.Store(t)
	return g, nil
}

// Update replaces the configuration and the store (unchanged rules of the
// same store keep their counters): everything, or on error nothing.
func (g *Gateway) Update(cfg *config.Config, store portero.Store) error {
	t, err := g.build(cfg, g.table.Load())
	if err != nil {
		return err
	}
	if err := g.limiter.Update(g.limiterConfig(cfg, store)); err != nil {
		return err
	}
	old := g.table.Swap(t)
	for _, r := range old.routes {
		if r.closer != nil {
			r.closer()
		}
	}
	return nil
}

// Limiter returns the middleware the gateway runs.
func (g *Gateway) Limiter() *httplimit.Limiter { return g.limiter }

// Config returns the configuration in use.
func (g *Gateway) Config() *config.Config { return g.table.Load().cfg }

// SetReady sets what /readyz answers when Hooks.Ready is nil: 200 when
// ready, 503 when not (before listening, and while draining at shutdown).
func (g *Gateway) SetReady(ok bool) { g.ready.Store(ok) }

func (g *Gateway) limiterConfig(cfg *config.Config, store portero.Store) httplimit.Config {
	return httplimit.Config{
		Policy:        cfg.Policy,
		Store:         store,
		ClientIP:      cfg.ClientIP,
		UserHeader:    cfg.File.Identity.UserHeader,
		TenantHeader:  cfg.File.Identity.TenantHeader,
		Now:           g.hooks.Now,
		LegacyHeaders: cfg.File.Headers.Legacy,
		OnStoreError:  cfg.OnError,
		LocalShare:    cfg.LocalShare,
		OnDecision:    g.hooks.OnDecision,
		OnError:       g.hooks.OnError,
		Shapes:        cfg.Shapes,
		Queues:        cfg.Queues,
	}
}

// Gate returns the overload.Gate that new requests ask for a slot; nil
// when the overload section is off.
func (g *Gateway) Gate() *overload.Gate {
	if sh := g.table.Load().shed; sh != nil {
		return sh.Gate()
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isProbe(r.URL.Path) {
		g.probe(w, r)
		return
	}
	// One table for the whole request, so that a reload cannot give it the
	// route of one configuration and the limits of another's.
	t := g.table.Load()
	if t.shed == nil {
		g.serve(w, r, t)
		return
	}
	// Shedding is outermost: before the API key is looked up, the body
	// read, the limits counted or an upstream touched.
	t.shed.Serve(w, r, t.served)
}

func isProbe(path string) bool { return path == "/healthz" || path == "/readyz" }

// probe answers /healthz (200 while the process runs) and /readyz.
func (g *Gateway) probe(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if r.URL.Path == "/healthz" {
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	var why string
	if g.hooks.Ready != nil {
		if err := g.hooks.Ready(); err != nil {
			why = "not ready: " + err.Error()
		}
	} else if !g.ready.Load() {
		why = "not ready"
	}
	if why != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, why+"\n")
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// front is what the gateway decides about a request before its limiter,
// for ServeHTTP and Decide alike: an answer of its own, or the route.
type front struct {
	r        *http.Request // with its API key's identities
	answered string        // an Answered* value; "" to go on to the limiter
	status   int           // the answer's status
	detail   string        // why, for a refusal
	route    *route        // nil: no route matches (404 once the limiter admits it)
}

// front decides r under t before the limiter: the probes, the API key and
// the plan's routes (caller), GET /v1/limits, then the route match. Requests
// that match no route are still limited, then answered 404.
func (t *table) front(r *http.Request) front {
	if isProbe(r.URL.Path) {
		return front{r: r, answered: AnsweredProbe, status: http.StatusOK}
	}
	r, ref, limits := t.caller(r)
	switch {
	case ref.status != 0:
		return front{r: r, answered: ref.answered(), status: ref.status, detail: ref.detail}
	case limits:
		return front{r: r, answered: AnsweredLimits, status: limitsStatus(r.Method)}
	}
	return front{r: r, route: t.match(r)}
}

// serve runs r through t after shedding: front, the limiter, the upstream.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, t *table) {
	f := t.front(r)
	if f.answered != "" {
		if g.hooks.OnAnswered != nil {
			g.hooks.OnAnswered(f.r, f.answered)
		}
		if f.answered == AnsweredLimits {
			g.limits(w, f.r, t)
		} else {
			httpanswer.Error(w, f.status, f.detail)
		}
		return
	}
	var name, up string
	var next http.Handler = notFound{}
	if f.route != nil {
		name, up, next = f.route.cfg.Name, f.route.cfg.Upstream.Name, f.route.handler
	}
	if g.hooks.OnRoute != nil {
		g.hooks.OnRoute(f.r, name, up)
	}
	g.limiter.Serve(w, f.r, name, next)
}

// Decision is the gateway's decision on one request (Decide): the
// limiter's, and the route.
type Decision struct {
	httplimit.Decision
	// Route and Upstream name the route r matched; empty when none did.
	Route, Upstream string
	// Answered, when not empty, says why the gateway answered r itself
	// before the limiter: AnsweredProbe, AnsweredLimits, AnsweredForbidden
	// or AnsweredBadRequest, Detail saying why for the last two. Verdict is nil
	// then.
	Answered, Detail string
}

// What the gateway answers itself, before any limit is counted
// (Decision.Answered, Hooks.OnAnswered).
const (
	// AnsweredProbe: /healthz or /readyz (200), never limited.
	AnsweredProbe = "probe"
	// AnsweredLimits: the limits endpoint (GET /v1/limits: 200, or 405
	// for another method), which counts nothing.
	AnsweredLimits = "limits"
	// AnsweredForbidden: 403, the API key is missing or unknown, or its
	// plan does not cover the request.
	AnsweredForbidden = "forbidden"
	// AnsweredBadRequest: 400, the API key header is given more than
	// once.
	AnsweredBadRequest = "bad-request"
)

// answered is the Decision.Answered of a refusal.
func (ref refusal) answered() string {
	if ref.status == http.StatusBadRequest {
		return AnsweredBadRequest
	}
	return AnsweredForbidden
}

// Decide decides r at now as ServeHTTP would (the same front, then
// httplimit.Limiter.Decide) but answers and forwards nothing: d.Status is
// what the gateway answers itself (the limiter's, front's, or 404 for a
// request admitted that matches no route), or 0 when it would forward r to
// d.Upstream. A request replayed from serve's access log carries its API
// key as the log recorded it (WithLoggedAPIKey). It models neither the
// overload section nor a hold canceled, nor the response (Pending and
// Settle do). It is what `portero replay` decides with.
func (g *Gateway) Decide(r *http.Request, now time.Time, d *Decision) {
	t := g.table.Load()
	f := t.front(r)
	d.Route, d.Upstream, d.Answered, d.Detail = "", "", f.answered, f.detail
	if f.answered != "" {
		d.Status, d.Delay, d.Verdict, d.Err, d.ClientIP = f.status, 0, nil, nil, netip.Addr{}
		if f.answered != AnsweredProbe {
			d.ClientIP = t.cfg.ClientIP.Resolve(f.r)
		}
		return
	}
	if f.route != nil {
		d.Route, d.Upstream = f.route.cfg.Name, f.route.cfg.Upstream.Name
	}
	g.limiter.Decide(f.r, d.Route, now, &d.Decision)
	if d.Status == 0 && d.Route == "" {
		d.Status = http.StatusNotFound
	}
}

// Pending is what a request Decide passed still has to settle once its
// response ends (httplimit.Pending): the rules counted after the response.
type Pending struct {
	httplimit.Pending
	notFound bool // no route matched: the gateway answered 404 itself
}

// Pending sets p to what d, decided at now, settles once its response
// ends, and reports whether there is anything (httplimit.Limiter.Pending):
// nothing for a request refused or answered before the limiter
// (d.Answered).
func (g *Gateway) Pending(d *Decision, now time.Time, p *Pending) bool {
	if d.Answered != "" {
		return false
	}
	p.notFound = d.Route == ""
	return g.limiter.Pending(&d.Decision, now, &p.Pending)
}

// Settle settles p with resp, the response that ended at now, as ServeHTTP
// settles a request once the upstream has answered resp — or, for one no
// route matched, once the gateway has answered it 404 itself.
func (g *Gateway) Settle(ctx context.Context, p *Pending, resp *policy.Response, now time.Time) error {
	if p.notFound {
		nf := *resp
		nf.Status = http.StatusNotFound
		resp = &nf
	}
	return g.limiter.Settle(ctx, &p.Pending, resp, now)
}

// match returns the first route that matches r, or nil.
func (t *table) match(r *http.Request) *route {
	pr := policy.Request{Method: r.Method, Host: r.Host, Path: r.URL.Path, Header: r.Header}
	for _, rt := range t.routes {
		if rt.cfg.Match.Matches(&pr) {
			return rt
		}
	}
	return nil
}

// notFound answers requests that match no route.
type notFound struct{}

func (notFound) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	httpanswer.Error(w, http.StatusNotFound, "no route matches "+quote.Cut(r.Method)+" "+quote.Cut(r.URL.Path))
}

// build prepares the table of cfg; old is the table it replaces (nil for
// the first), whose Gate it keeps when the overload section is unchanged.
func (g *Gateway) build(cfg *config.Config, old *table) (*table, error) {
	if cfg == nil || cfg.Policy == nil {
		return nil, errors.New("gateway: no configuration")
	}
	t := &table{cfg: cfg, keyField: http.CanonicalHeaderKey(cfg.Gateway.KeyHeader)}
	if err := g.buildShed(t, old); err != nil {
		return nil, err
	}
	handlers := map[string]*route{}
	for _, rc := range cfg.Routes {
		if rc.Upstream == nil {
			return nil, fmt.Errorf("gateway: route %s has no upstream", rc.Name)
		}
		up, ok := handlers[rc.Upstream.Name]
		if !ok {
			up = g.upstream(cfg, rc.Upstream)
			handlers[rc.Upstream.Name] = up
		}
		h := up.handler
		if rc.StripPrefix != "" {
			h = stripPrefix(rc.StripPrefix, h)
		}
		t.routes = append(t.routes, &route{cfg: rc, handler: h, closer: up.closer})
	}
	return t, nil
}

// buildShed sets t.shed from the overload section: the old table's Gate
// when its settings are the same, else a new one.
func (g *Gateway) buildShed(t *table, old *table) error {
	oc := t.cfg.Overload
	if oc == nil {
		return nil
	}
	var gate *overload.Gate
	// old.shed's Gate was built from (a section equal to) old's section.
	if old != nil && old.shed != nil && old.cfg.Overload.Gate == oc.Gate {
		gate = old.shed.Gate()
	} else {
		var err error
		if gate, err = overload.New(oc.Gate); err != nil {
			return fmt.Errorf("gateway: overload: %w", err)
		}
	}
	rules := make([]httplimit.PriorityRule, len(t.cfg.Priorities))
	for i, p := range t.cfg.Priorities {
		rules[i] = httplimit.PriorityRule{Match: p.Match, Priority: p.Priority}
	}
	prio, err := httplimit.PriorityByRule(rules, overload.Default)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	sc := httplimit.ShedConfig{Gate: gate, Priority: prio, Timeout: oc.Deadline, OnRefuse: g.hooks.OnShed}
	if !oc.Tenant.IsZero() {
		key, pol := oc.Tenant, t.cfg.Policy
		sc.Tenant = func(r *http.Request) string {
			pr := g.limiter.Config().Request(r)
			if rt := t.match(r); rt != nil {
				pr.Route = rt.cfg.Name
			}
			k, _ := pol.KeyOf(key, nil, pr) // no value: the tenant "" of those without one
			return k
		}
	}
	t.served = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serve(w, r, t) })
	t.shed, err = httplimit.NewShedder(sc)
	return err
}

func stripPrefix(prefix string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, prefix)
		if p == r.URL.Path || (p != "" && p[0] != '/') {
			h.ServeHTTP(w, r) // not under the prefix (/apix for /api)
			return
		}
		if p == "" {
			p = "/"
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = p
		r2.URL.RawPath = ""
		h.ServeHTTP(w, r2)
	})
}

func (g *Gateway) upstream(cfg *config.Config, uc *config.UpstreamConfig) *route {
	if uc.Demo {
		return &route{handler: demoHandler(uc.Name)}
	}
	target := uc.URL
	trusted := cfg.ClientIP
	transport := &http.Transport{
		Proxy:                 nil, // never send upstream traffic through an environment proxy
		DialContext:           (&net.Dialer{Timeout: uc.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		ResponseHeaderTimeout: uc.Timeout,
		MaxIdleConnsPerHost:   cmp.Or(uc.MaxIdleConns, 64),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   uc.DialTimeout,
		ForceAttemptHTTP2:     true,
		// Pass the client's Accept-Encoding through rather than ask for gzip
		// and decompress on its behalf.
		DisableCompression: true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			if uc.PreserveHost {
				pr.Out.Host = pr.In.Host
			}
			// Rewrite starts from a request without forwarding headers; keep
			// the incoming chain only when it came from a trusted proxy, then
			// append the peer.
			if len(trusted.TrustedProxies) > 0 {
				if peer, ok := clientip.ParseHop(pr.In.RemoteAddr); ok && trusted.Trusted(peer) {
					if v := pr.In.Header.Values("X-Forwarded-For"); len(v) > 0 {
						pr.Out.Header["X-Forwarded-For"] = append([]string(nil), v...)
					}
				}
			}
			pr.SetXForwarded()
		},
		Transport:     transport,
		BufferPool:    &copyBuffers,
		FlushInterval: uc.FlushPeriod,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if g.hooks.OnProxyError != nil {
				g.hooks.OnProxyError(r, uc.Name, err)
			}
			status := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) {
				status = http.StatusGatewayTimeout
			}
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client went away: nobody to answer
			}
			httpanswer.Error(w, status, "upstream "+uc.Name+" did not answer properly")
		},
	}
	return &route{handler: rp, closer: transport.CloseIdleConnections}
}

// copyBufferSize is the size of ReverseProxy's own response copy buffer.
const copyBufferSize = 32 << 10

// copyBuffers are every upstream's response copy buffers: without a pool
// ReverseProxy allocates 32 KiB per request (docs/benchmarks-gateway.md).
// Arrays are pooled, so that Put allocates nothing.
var copyBuffers bufferPool

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*[copyBufferSize]byte); ok {
		return b[:]
	}
	return new([copyBufferSize]byte)[:]
}

func (p *bufferPool) Put(b []byte) {
	if cap(b) >= copyBufferSize {
		p.pool.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
}

// demoHandler is the built-in upstream of the default configuration: it
// answers every request itself, so that `portero serve` works with nothing
// else running.
func demoHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"upstream": name,
			"message":  "hello from Portero's built-in demo upstream; repeat this request quickly to see a 429",
			"method":   r.Method,
			"path":     r.URL.Path,
		})
	})
}
