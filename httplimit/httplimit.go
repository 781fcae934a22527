// Package httplimit is Portero's net/http middleware. It has the standard
// shape func(http.Handler) http.Handler, so chi, gin (through its
// WrapH/adapter), echo (echo.WrapMiddleware) and plain net/http can use it.
//
// It is a door: for each request it finds the client (ClientIP), builds a
// policy.Request, has the policy compile it into hits and the engine
// (package engine) decide them — before the handler runs and before the
// body is read — and then either answers for itself or passes the request
// on:
//
//   - refused by a rule: 429 Too Many Requests, Retry-After in whole seconds
//     rounded up (at least 1), Cache-Control: no-store, and an
//     application/problem+json body of type quota-exceeded naming the
//     violated policies;
//   - a cost above what a rule can ever admit at once: 429 of the same
//     type without Retry-After (retrying never helps), whose detail names
//     the rule, the cost and the rule's maximum (also in its cost and
//     max-cost members);
//   - refused for the service's own sake (the store down under
//     OnStoreError deny, or a service-wide concurrency limit full): 503
//     Service Unavailable of type temporary-reduced-capacity — never 429,
//     since the client did nothing wrong;
//   - a cost that cannot be read: 400 or 411 naming the rule and header;
//   - allowed: the handler runs, with RateLimit-Policy and RateLimit
//     (draft-ietf-httpapi-ratelimit-headers-11) added to its response, as
//     engine/header writes them for every door.
//
// A queue rule (leaky-queue) shapes: an admitted request is held for its
// Decision.Delay, until its place in the queue departs, before the handler
// runs. The request's context bounds the wait: a request whose deadline
// would pass first is refused at once with the rule's 429, and one whose
// context is canceled while it waits gets a 503. Config.Shapes shapes a
// queue rule as nginx's limit_req with burst and delay=N: the first places
// pass at once, the rest are spaced out, and a longest hold bounds them.
//
// Shed is the other half of protecting a service: load shedding for the
// service's own sake (overload.Gate), outermost, before all of the above.
//
// Beside the rate limits, the policy's concurrency rules
// (policy.Rule.Concurrency) limit the requests in flight, per client, API
// key, tenant or route and for the whole service, decided by the engine
// with the rate rules of the same request (engine.Engine.Admit: all or
// nothing, one failure policy), with leases in memory or in Redis that the
// middleware renews and releases however a request ends (lease.go); a
// client over its own concurrency limit gets 429, a request over the
// service's 503, and the RateLimit fields announce the limits with
// qu="concurrent-requests" beside the rate limits'. A request a
// concurrency rule refuses may wait for a slot (Config.Queues).
// NewConcurrency is a Limiter with concurrency rules only;
// ConcurrencyLimit, one cap for the process, is Shed over a Gate.
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
	// UserHeader and TenantHeader name request headers that carry the
	// authenticated user and tenant, set by an authenticating proxy in front
	// of the service; empty means none. Values set with WithIdentity by
	// earlier middleware take precedence. Trust these headers only when
	// clients cannot reach the service without passing that proxy.
	UserHeader, TenantHeader string
	// Route names the route of a request, for keys with a route part; nil
	// means none (the rule's own pattern is used).
	Route func(*http.Request) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds from now, not a timestamp) for older
	// clients, describing the refusing rule or else the one closest to
	// exhaustion.
	LegacyHeaders bool
	// OnStoreError is the failure policy when the store fails
	// (portero.FailurePolicy): FailAllow (the default when empty) lets
	// requests pass uncounted, since a broken limiter should not take the
	// service down with it; FailDeny answers 503; FailLocal decides in this
	// instance's memory with LocalShare of each limit. FailError is refused:
	// the middleware has no caller to report an error to.
	OnStoreError portero.FailurePolicy
	// LocalShare is the share of each limit one instance admits under
	// FailLocal, in (0, 1]; 0 means 1.
	LocalShare float64
	// OnDecision, when not nil, is called after every evaluation with the
	// verdict and the time the decision took; it must be fast and safe for
	// concurrent use (metrics, logs). The verdict is reused for later
	// requests once OnDecision returns: copy what must outlive the call (the
	// strings in it, such as Result.Key, may be kept).
	OnDecision func(r *http.Request, v *engine.Verdict, storeTime time.Duration)
	// OnError, when not nil, is called when a request could not be
	// evaluated normally: a store failure (v.Degraded; the failure policy
	// answered) or an unusable cost.
	OnError func(r *http.Request, err error)
	// Shapes says, by rule name, how a leaky-queue rule holds the requests
	// it admits (overload.Shape: nginx's delay=N, and a longest hold); a
	// queue rule not named holds each request until its departure. Naming
	// a rule that does not exist or is not a queue is an error.
	Shapes map[string]overload.Shape
	// Queues lets the requests that a concurrency rule refuses wait for a
	// slot of their key, by rule name (overload.Queue: size per key,
	// timeout, FIFO or LIFO); a concurrency rule not named refuses at once.
	// Naming a rule that does not exist or is not a concurrency rule is an
	// error.
	Queues map[string]overload.Queue
	// Leases hands out the leases of the policy's concurrency rules; nil
	// means Store, which store/memstore and store/redisstore are. Leases
	// follow OnStoreError like the rate decisions: one failure policy.
	Leases portero.LeaseStore
	// LeaseRetryAfter is the longest Retry-After of a refusal by a
	// concurrency rule (a slot usually comes back when a request ends,
	// long before its lease would expire); 0 means 1 s.
	LeaseRetryAfter time.Duration

	pre                      *prepared      // formatted once per policy by Update
	engine                   *engine.Engine // built by Update over Store
	userHeader, tenantHeader string         // canonical forms of UserHeader and TenantHeader
	defaultNow               bool           // Now was nil: the decision time can be the start of the store timer
}

// Limiter is the middleware. It is safe for concurrent use, and its
// configuration can be replaced while it serves (Update), which is how the
// gateway reloads.
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

// Update replaces the configuration; requests already being evaluated
// finish with the old one, and keep the leases they hold until they end
// (leases belong to a concurrency rule's name and key, so a rule whose Max
// changes counts them: lowered from 3 to 2 with 3 in flight, it admits
// again once fewer than 2 are). Requests waiting for a slot keep their
// place and the queue they joined with. An invalid cfg is refused and the
// old one kept.
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

// WithIdentity returns a copy of ctx carrying an identity value, such as
// ("user", "alice") or ("tenant", "acme"), for keys with a user, tenant or
// identity:NAME part: policy.WithIdentity, which every door reads.
// Authentication middleware that runs before the limiter calls it: r =
// r.WithContext(httplimit.WithIdentity(r.Context(), "user", id)).
func WithIdentity(ctx context.Context, name, value string) context.Context {
	return policy.WithIdentity(ctx, name, value)
}

// WithIdentities is WithIdentity for several values at once
// (policy.WithIdentities): the gateway sets a caller's API key ID and plan
// this way on every request.
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

// fill sets pr from r. id, when not nil, is an empty map it may use for the
// identity, so that the pooled one is reused.
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

// decide builds the policy request of r, compiles it, has the engine admit
// it at now (its concurrency rules' leases with its rate rules), lets it
// wait for a queued concurrency rule's slot when wait is set, and applies
// the queue rules' holds: the one decision path of Serve, Handler and
// Decide. It returns the status the limiter answers itself — 429 refused,
// 503 when the store failed under deny or the service's concurrency limit
// is full, 400 or 411 for a cost that cannot be read, 500 for an error that
// is a bug — or 0 to pass r on after delay, holding the leases of
// s.v.Held(). errGone means the request's context ended while it waited.
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

// Decision is the limiter's decision on one request, with no answer
// written and no handler called (Limiter.Decide). Reuse one for request
// after request: it keeps its memory.
type Decision struct {
	// Status is what the limiter answers itself: 429 (refused, a cost that
	// can never pass included), 503 (the store failed under deny, or the
	// service's own concurrency limit is full), 400 or 411 (a cost that
	// cannot be read), 500 (a bug); 0 when it passes the request on.
	Status int
	// Delay is how long a queue rule holds the request before passing it
	// on.
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

// Decide decides r with route as its route name ("" for none), at now,
// exactly as Serve would — the same request building (client address,
// identity, route), the same compilation, engine and queue holds — but
// writes no answer, calls no handler and no hook, and waits for no
// concurrency slot. A concurrency rule's lease it takes is given back at
// once: a replayed request has no duration. d's verdict and keys are valid
// until its next use. It is for replaying traffic (portero replay) and for
// tests that compare doors.
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

// scratch is the memory one request needs to be decided, kept in a pool so
// that the decision path allocates almost nothing of its own.
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
	// The hits and the verdict are reset by the next Compile and Decide
	// (what they hold until then, the last request's keys, goes with the
	// scratch when the pool drops it).
	s.hits = s.hits[:0]
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

// Serve decides r as Handler does and then answers for itself or calls
// next, with route as the request's route name for keys with a route part
// ("" for none); Config.Route is not consulted. It is for callers that have
// already matched the route, such as a gateway, and so need no closure or
// context value to pass it along.
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
