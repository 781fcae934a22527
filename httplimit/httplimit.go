// Package httplimit is Portero's net/http middleware, of the standard shape
// func(http.Handler) http.Handler (chi, gin's WrapH, echo's WrapMiddleware,
// plain net/http). It is a door, a protocol's way to the engine: for each
// request it finds the client (ClientIP), has the policy compile a
// policy.Request into hits and the engine admit them, before the handler
// runs and before the body is read, then passes the request on with the
// RateLimit fields (engine/header) or answers the refusal itself
// (internal/httpanswer): 429 quota-exceeded with Retry-After, without it for
// a cost that can never pass, 503 temporary-reduced-capacity for the
// service's own refusals (the store down under deny, a service-wide
// concurrency limit), 400 or 411 for a cost that cannot be read.
//
// A leaky-queue rule holds an admitted request until its place departs,
// shaped as nginx's limit_req delay=N (Config.Shapes) and bounded by the
// shape and the request's deadline (queue.go). Concurrency rules hold a
// lease while the handler runs and may let refused requests wait for a
// slot (lease.go, Config.Queues). Shed, outermost, sheds load for the
// service's own sake (overload.Gate).
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/httpanswer"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// Config configures a Limiter. Policy and Store are required; every other
// field's zero value is the documented default.
type Config struct {
	// Policy holds the rules. Required.
	Policy *policy.Policy
	// Store keeps the counters. Required. The Limiter does not close it.
	Store portero.Store
	// ClientIP says how to find the client address; the zero value uses the
	// connection's address and ignores forwarding headers.
	ClientIP ClientIP
	// UserHeader and TenantHeader name request headers with the user and
	// tenant an authenticating proxy in front set; empty means none. Values
	// set with WithIdentity win. Trust them only when clients cannot reach
	// the service but through that proxy.
	UserHeader, TenantHeader string
	// Route names a request's route for keys with a route part; nil means
	// none (the rule's own pattern is used).
	Route func(*http.Request) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset (seconds
	// from now) of the rule that decided, for older clients.
	LegacyHeaders bool
	// OnStoreError is the failure policy when the store fails: FailAllow
	// (when empty) lets requests pass uncounted, FailDeny answers 503,
	// FailLocal decides in this instance's memory with LocalShare of each
	// limit. FailError is refused: there is no caller to report to.
	OnStoreError portero.FailurePolicy
	// LocalShare is the share of each limit one instance admits under
	// FailLocal, in (0, 1]; 0 means 1.
	LocalShare float64
	// OnDecision, when not nil, is called after every decision with the
	// verdict and the time it took; it must be fast and safe for concurrent
	// use. The verdict is reused once it returns (its strings may be kept).
	OnDecision func(r *http.Request, v *engine.Verdict, storeTime time.Duration)
	// OnError, when not nil, is called when a request could not be decided
	// normally: a store failure (the failure policy answered) or an
	// unusable cost.
	OnError func(r *http.Request, err error)
	// Shapes says, by rule name, how a leaky-queue rule holds the requests
	// it admits (nginx's delay=N, and a longest hold); an unnamed queue
	// rule holds each until its departure.
	Shapes map[string]overload.Shape
	// Queues lets the requests a concurrency rule refuses wait for a slot
	// of their key, by rule name; an unnamed rule refuses at once.
	Queues map[string]overload.Queue
	// Leases hands out the leases of the policy's concurrency rules; nil
	// means Store. They follow OnStoreError, as the rate decisions do.
	Leases portero.LeaseStore
	// LeaseRetryAfter is the longest Retry-After of a refusal by a
	// concurrency rule; 0 means 1 s.
	LeaseRetryAfter time.Duration

	pre                      *prepared      // formatted once per policy by Update
	engine                   *engine.Engine // built by Update over Store
	userHeader, tenantHeader string         // canonical forms of UserHeader and TenantHeader
	defaultNow               bool           // Now was nil: the decision time can be the start of the store timer
}

// Limiter is the middleware. It is safe for concurrent use; Update
// replaces its configuration while it serves.
type Limiter struct {
	cfg     atomic.Pointer[Config]
	waiting *overload.Waitlist // requests waiting for a concurrency slot, across Updates
}

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	l := &Limiter{waiting: overload.NewWaitlist()}
	if err := l.Update(cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// Middleware returns New(cfg)'s Handler method: the standard shape.
func Middleware(cfg Config) (func(http.Handler) http.Handler, error) {
	l, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return l.Handler, nil
}

// Update replaces the configuration, or, when cfg is invalid, keeps the old
// one. Requests being decided finish with the old one and keep their
// leases, which belong to a rule's name and key (a rule whose Max is
// lowered admits again once fewer than the new Max are held); requests
// waiting for a slot keep their place.
func (l *Limiter) Update(cfg Config) error {
	if cfg.Policy == nil {
		return errors.New("httplimit: Config.Policy is required")
	}
	if cfg.Store == nil {
		return errors.New("httplimit: Config.Store is required")
	}
	if err := cfg.ClientIP.Validate(); err != nil {
		return fmt.Errorf("httplimit: client ip: %w", err)
	}
	cfg.defaultNow = cfg.Now == nil
	if cfg.defaultNow {
		cfg.Now = time.Now
	}
	if cfg.OnStoreError == portero.FailError {
		return errors.New("httplimit: OnStoreError error: the middleware has no caller to report an error to; want allow, deny or local")
	}
	e, err := engine.New(engine.Options{Store: cfg.Store, OnError: cfg.OnStoreError, LocalShare: cfg.LocalShare,
		Leases: cfg.Leases, LeaseRetryAfter: cfg.LeaseRetryAfter})
	if err != nil {
		return fmt.Errorf("httplimit: %w", err)
	}
	cfg.engine = e
	cfg.pre = prepare(cfg.Policy, cfg.LegacyHeaders)
	if err := cfg.pre.setShapes(cfg.Policy, cfg.Shapes); err != nil {
		return err
	}
	if err := cfg.pre.setQueues(cfg.Policy, cfg.Queues); err != nil {
		return err
	}
	for _, r := range cfg.Policy.Rules() {
		if r.IsConcurrency() && e.Leases() == nil {
			return fmt.Errorf("httplimit: rule %q is a concurrency limit and the store keeps no leases: set Config.Leases", r.Name)
		}
	}
	if cfg.UserHeader != "" {
		cfg.userHeader = http.CanonicalHeaderKey(cfg.UserHeader)
	}
	if cfg.TenantHeader != "" {
		cfg.tenantHeader = http.CanonicalHeaderKey(cfg.TenantHeader)
	}
	l.cfg.Store(&cfg)
	return nil
}

// Engine returns the engine the limiter decides with: its store and its
// failure policy (Config.OnStoreError).
func (l *Limiter) Engine() *engine.Engine { return l.cfg.Load().engine }

// Config returns the configuration in use. The caller must not change it.
func (l *Limiter) Config() *Config { return l.cfg.Load() }

// Waiting returns how many requests wait for a concurrency slot now
// (Config.Queues).
func (l *Limiter) Waiting() int { return l.waiting.Len() }

// WithIdentity returns ctx with an identity value, such as ("user",
// "alice"), for keys with a user, tenant or identity:NAME part
// (policy.WithIdentity): authentication that runs before the limiter sets
// it.
func WithIdentity(ctx context.Context, name, value string) context.Context {
	return policy.WithIdentity(ctx, name, value)
}

// WithIdentities is WithIdentity for several values at once.
func WithIdentities(ctx context.Context, values map[string]string) context.Context {
	return policy.WithIdentities(ctx, values)
}

// Identity returns the identity values set with WithIdentity; nil when none.
func Identity(ctx context.Context) map[string]string { return policy.Identity(ctx) }

// Request builds the policy.Request for r under cfg.
func (cfg *Config) Request(r *http.Request) *policy.Request {
	pr := &policy.Request{}
	var route string
	if cfg.Route != nil {
		route = cfg.Route(r)
	}
	cfg.fill(pr, r, route, nil)
	return pr
}

// fill sets pr from r; id, when not nil, is an empty map for the identity
// (the pooled one).
func (cfg *Config) fill(pr *policy.Request, r *http.Request, route string, id map[string]string) {
	ip, fwd := cfg.ClientIP.ResolveForwarded(r)
	*pr = policy.Request{
		Method:        r.Method,
		Host:          r.Host,
		Path:          r.URL.Path,
		Header:        r.Header,
		ClientIP:      ip,
		ContentLength: r.ContentLength,
		Identity:      Identity(r.Context()),
		Route:         route,
		RawQuery:      r.URL.RawQuery,
		Forwarded:     fwd,
	}
	if cfg.userHeader == "" && cfg.tenantHeader == "" {
		return
	}
	user, tenant := headerValue(r.Header, cfg.userHeader), headerValue(r.Header, cfg.tenantHeader)
	if user == "" && tenant == "" {
		return // nothing to add: keep the context's map (or none)
	}
	if id == nil {
		id = make(map[string]string, len(pr.Identity)+2)
	}
	if user != "" {
		id["user"] = user
	}
	if tenant != "" {
		id["tenant"] = tenant
	}
	for k, v := range pr.Identity { // values set by middleware win
		id[k] = v
	}
	pr.Identity = id
}

// headerValue is h.Get(name) for a canonical name.
func headerValue(h http.Header, name string) string {
	if name == "" {
		return ""
	}
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// decide is the one decision path of Serve, Handler and Decide: it builds
// and compiles r's policy request, has the engine admit it at now, lets it
// wait for a concurrency slot when wait is set (Config.Queues), and
// returns the status the limiter answers itself (httpanswer.Status, or 400,
// 411 for a cost that cannot be read, 500 for a bug), or 0 to pass r on
// after delay, holding s.v.Held(). errGone: r's context ended while it
// waited.
func (l *Limiter) decide(cfg *Config, s *scratch, r *http.Request, route string, now time.Time, wait bool) (status int, delay time.Duration, err error) {
	cfg.fill(&s.req, r, route, s.id)
	s.hits, s.keys, err = cfg.Policy.Compile(&s.req, s.hits[:0], s.keys)
	if err == nil {
		err = cfg.admit(r.Context(), now, s)
	}
	if err == nil && wait && !s.v.Allowed && len(cfg.pre.queue) > 0 {
		err = l.wait(cfg, r, s)
	}
	if err != nil {
		var re *policy.RuleError
		if errors.As(err, &re) {
			return costStatus(re), 0, err
		}
		return http.StatusInternalServerError, 0, err
	}
	if s.v.Allowed {
		return 0, queueDelay(&s.v, cfg.pre), nil
	}
	return httpanswer.Status(&s.v), 0, nil
}

// admit has the engine admit s's hits at now, each queue hit bounded by its
// shape and the request's deadline (ctx's).
func (cfg *Config) admit(ctx context.Context, now time.Time, s *scratch) error {
	cfg.pre.bound(ctx, s.hits)
	return cfg.engine.Admit(ctx, now, s.hits, &s.v)
}

// Decision is the limiter's decision on one request (Limiter.Decide); it
// keeps its memory for reuse.
type Decision struct {
	// Status is what the limiter answers itself (429, 503, 400, 411, 500),
	// or 0 when it passes the request on.
	Status int
	// Delay is how long a queue rule holds the request first.
	Delay time.Duration
	// Verdict is the engine's verdict; nil when Err is set.
	Verdict *engine.Verdict
	// Err is why the request could not be decided: a *policy.RuleError for
	// a cost that cannot be read.
	Err error
	// ClientIP is the client address the limiter settled on.
	ClientIP netip.Addr

	s scratch
}

// Decide decides r, with route as its route name ("" for none), at now,
// exactly as Serve would, but writes no answer, calls no handler or hook
// and waits for no slot; a lease it takes is given back at once (a
// replayed request has no duration). d is valid until its next use. It is
// for replaying traffic (portero replay).
func (l *Limiter) Decide(r *http.Request, route string, now time.Time, d *Decision) {
	cfg := l.cfg.Load()
	if d.s.id == nil {
		d.s.id = map[string]string{}
	}
	clear(d.s.id)
	d.Status, d.Delay, d.Err = l.decide(cfg, &d.s, r, route, now, false)
	if held := d.s.v.Held(); d.Err == nil && len(held) > 0 {
		releaseAll(cfg, r, held)
		l.signal(held)
	}
	d.Verdict = &d.s.v
	if d.Err != nil {
		d.Verdict = nil
	}
	d.ClientIP = d.s.req.ClientIP
}

// Now returns the limiter's clock's instant (Config.Now).
func (l *Limiter) Now() time.Time { return l.cfg.Load().Now() }

// costStatus is the status of a cost that cannot be read: 411 when a rule
// counts body bytes and none are declared, 400 otherwise.
func costStatus(re *policy.RuleError) int {
	if errors.Is(re, policy.ErrLengthRequired) {
		return http.StatusLengthRequired
	}
	return http.StatusBadRequest
}

// scratch is the memory one request needs to be decided, pooled.
type scratch struct {
	req    policy.Request
	hits   []engine.Hit
	keys   []byte
	v      engine.Verdict
	id     map[string]string
	fields httpanswer.Fields
	body   []byte
}

var scratchPool = sync.Pool{New: func() any { return &scratch{id: map[string]string{}} }}

func (s *scratch) release() {
	s.req = policy.Request{}
	s.hits = s.hits[:0] // the verdict is reset by the next decision
	clear(s.id)
	s.fields.Reset()
	if cap(s.body) > 4<<10 {
		s.body = nil // do not keep an unusually large body around
	}
	s.body = s.body[:0]
	scratchPool.Put(s)
}

// Handler wraps next: the standard middleware shape.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := l.cfg.Load()
		var route string
		if cfg.Route != nil {
			route = cfg.Route(r)
		}
		l.serve(cfg, w, r, route, next)
	})
}

// Serve is Handler for a caller that matched the route itself (a gateway):
// route is the request's route name ("" for none), and Config.Route is not
// consulted.
func (l *Limiter) Serve(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	l.serve(l.cfg.Load(), w, r, route, next)
}

func (l *Limiter) serve(cfg *Config, w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	s := scratchPool.Get().(*scratch)
	now := cfg.Now()
	start := now
	if !cfg.defaultNow {
		start = time.Now()
	}
	status, delay, err := l.decide(cfg, s, r, route, now, true)
	if err != nil {
		s.release()
		if errors.Is(err, errGone) { // nobody is left to read this
			WriteUnavailable(w, time.Second, "the request ended while it waited for a slot")
			return
		}
		if cfg.OnError != nil {
			cfg.OnError(r, err)
		}
		var re *policy.RuleError
		if errors.As(err, &re) {
			WriteCostError(w, re)
			return
		}
		// Only a bug reaches here (the failure policy answers store
		// failures): say so rather than guess.
		httpanswer.Error(w, status, err.Error())
		return
	}
	v := &s.v
	if v.Degraded != nil && cfg.OnError != nil {
		cfg.OnError(r, v.Degraded)
	}
	if cfg.OnDecision != nil {
		cfg.OnDecision(r, v, time.Since(start))
	}
	f := &s.fields
	if status != 0 {
		s.body = cfg.pre.answer.Refuse(w, f, s.body, v, status)
		s.release()
		return
	}
	cfg.pre.answer.Fields(f, v)
	f.Apply(w.Header())
	var pending []policy.Settlement
	var req policy.Request
	if cfg.Policy.Settles() {
		if pending = cfg.Policy.Pending(v, now, nil); len(pending) > 0 {
			req = s.req
			req.Identity = maps.Clone(req.Identity) // the pooled map is cleared on release
		}
	}
	k := l.keep(cfg, r, v)
	var back []engine.Adjustment
	if delay > 0 {
		back = v.Refunds(now, nil)
	}
	s.release() // before the handler runs: it may take long
	defer l.release(k)
	if delay > 0 && !hold(r.Context(), delay) {
		refund(cfg, r, back)
		WriteUnavailable(w, delay, "the request was canceled while it waited in the queue")
		return
	}
	if len(pending) > 0 {
		cfg.serveSettled(w, r, next, &req, pending)
		return
	}
	next.ServeHTTP(w, r)
}
