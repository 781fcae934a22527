package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine/header"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// Concurrency limits: where a rate limit counts what arrived, a
// concurrency limit counts what has not finished, so it tightens on its own
// when the service slows down (Little's law: C requests in flight that take
// S seconds each admit at most C/S per second). The Concurrency middleware
// takes one lease per rule that applies before calling the next handler and
// releases it when the handler returns, however it returns: normally, with
// an error status, by panicking, after its client went away or a
// http.TimeoutHandler gave up on it, or after hijacking the connection. A
// lease held in Redis is renewed while the handler runs (every TTL/3), so a
// crashed instance leaks its slots for at most the lease's TTL.

// ConcurrencyRule is one concurrency limit of a Concurrency middleware: at
// most Max requests in flight at once per key.
type ConcurrencyRule struct {
	// Name identifies the rule in headers, problem bodies and the store
	// (policy.ValidName). Two rules with one name share their leases.
	Name string
	// Match selects the requests the rule applies to; the zero value
	// selects all of them.
	Match policy.Match
	// Key says under which name requests are counted, as for a rate rule
	// (policy.Key): ip, header:X-API-Key, tenant, route, global …; a request
	// for which a part has no value is not counted by the rule. Required.
	// A key that names the client (ip, header, user, tenant, identity) is
	// the client's own limit, refused with 429; any other (global, route,
	// method, host) is the service's, refused with 503.
	Key policy.Key
	// Max is C, the most requests in flight per key. Required.
	Max int64
	// TTL is the lease's lifetime without renewal; 0 means
	// portero.DefaultLeaseTTL. The middleware renews every TTL/3.
	TTL time.Duration
}

// ConcurrencyConfig configures a Concurrency middleware. Rules and Store
// are required; every other field's zero value is the documented default.
type ConcurrencyConfig struct {
	// Rules are tried in order; a request must get a lease from every rule
	// that applies to it, or it gets none (those taken are released).
	// Put the clients' own rules first, so that a client over its share is
	// told so (429) before it takes a slot of the service's.
	Rules []ConcurrencyRule
	// Store hands out the leases (store/memstore for one process,
	// store/redisstore to share the limit among instances). Required; the
	// middleware does not close it.
	Store portero.LeaseStore
	// ClientIP, UserHeader, TenantHeader and Route say how to find the
	// parts of the keys, as in Config.
	ClientIP                 ClientIP
	UserHeader, TenantHeader string
	Route                    func(*http.Request) string
	// KeyOptions group client addresses in ip keys, as the rate policy's
	// policy.Options do; use the same values so that ip keys agree.
	KeyOptions policy.Options
	// RetryAfter is the Retry-After of a refusal, in whole seconds rounded
	// up (at least 1); 0 means 1 s. A slot usually comes back when a
	// request ends, long before any lease would expire.
	RetryAfter time.Duration
	// Now is the clock of acquisitions and renewals; nil means time.Now.
	Now func() time.Time
	// OnError, when not nil, is called when the store fails: a refused
	// acquisition (the request is answered 503), a renewal or a release.
	OnError func(r *http.Request, err error)
}

// Concurrency is the concurrency-limit middleware. It is safe for
// concurrent use, and its configuration can be replaced while it serves
// (Update): requests in flight keep the leases they took.
type Concurrency struct {
	cfg atomic.Pointer[concConfig]
}

// concConfig is a validated ConcurrencyConfig with what each request needs.
type concConfig struct {
	ConcurrencyConfig
	rules []concRule
	keys  *policy.Policy // no rules: builds keys with KeyOptions
	ids   Config         // client address and identity headers (fill)
	retry time.Duration
	every time.Duration // renewal interval: the shortest TTL / 3
}

type concRule struct {
	ConcurrencyRule
	lease   portero.ConcurrencyRule
	service bool   // refusals are the service's (503)
	policy  string // the RateLimit-Policy member
	quoted  string // the name as an sf-string, for the RateLimit item
}

// NewConcurrency validates cfg and returns the middleware.
func NewConcurrency(cfg ConcurrencyConfig) (*Concurrency, error) {
	c := &Concurrency{}
	if err := c.Update(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// Update replaces the configuration; an invalid cfg is refused and the old
// one kept. Leases belong to a rule's name: a rule whose Max changes keeps
// the leases already held, and admits again once fewer than the new Max are.
func (c *Concurrency) Update(cfg ConcurrencyConfig) error {
	if cfg.Store == nil {
		return errors.New("httplimit: ConcurrencyConfig.Store is required")
	}
	if err := cfg.ClientIP.Validate(); err != nil {
		return fmt.Errorf("httplimit: client ip: %w", err)
	}
	keys, err := policy.New(nil, cfg.KeyOptions)
	if err != nil {
		return fmt.Errorf("httplimit: key options: %w", err)
	}
	cc := &concConfig{ConcurrencyConfig: cfg, keys: keys, retry: cfg.RetryAfter}
	if cc.Now == nil {
		cc.Now = time.Now
	}
	if cc.retry <= 0 {
		cc.retry = time.Second
	}
	cc.ids = Config{ClientIP: cfg.ClientIP}
	if cfg.UserHeader != "" {
		cc.ids.userHeader = http.CanonicalHeaderKey(cfg.UserHeader)
	}
	if cfg.TenantHeader != "" {
		cc.ids.tenantHeader = http.CanonicalHeaderKey(cfg.TenantHeader)
	}
	var errs []error
	names := map[string]bool{}
	for i, r := range cfg.Rules {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("httplimit: concurrency rules[%d] (%s): %s", i, r.Name, fmt.Sprintf(format, args...)))
		}
		if err := policy.ValidName(r.Name); err != nil {
			bad("%v", err)
			continue
		}
		if names[r.Name] {
			bad("name used twice")
			continue
		}
		names[r.Name] = true
		if r.Key.IsZero() {
			bad("key: required")
			continue
		}
		if err := r.Match.Compile(); err != nil {
			bad("match: %v", err)
			continue
		}
		lr := portero.ConcurrencyRule{Name: r.Name, Max: r.Max, TTL: r.TTL}
		if err := lr.Validate(); err != nil {
			bad("%v", err)
			continue
		}
		if e := lr.LeaseTTL() / 3; cc.every == 0 || e < cc.every {
			cc.every = e
		}
		ann, err := header.AnnounceConcurrency(r.Name, r.Max)
		if err != nil {
			bad("%v", err)
			continue
		}
		cc.rules = append(cc.rules, concRule{ConcurrencyRule: r, lease: lr, service: !r.Key.PerClient(), policy: ann.Policy, quoted: ann.Name})
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.cfg.Store(cc)
	return nil
}

// Handler wraps next: the standard middleware shape. Put it after (inside)
// the rate-limit Limiter, so that a request the rate limit refuses takes
// no slot, and so that the RateLimit fields of both reach the client (this
// middleware adds its members to the fields; the Limiter sets them).
func (c *Concurrency) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := c.cfg.Load()
		held, ok := cfg.acquire(w, r)
		if !ok {
			return
		}
		if len(held) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		k := cfg.keep(r, held)
		defer k.release()
		next.ServeHTTP(w, r)
	})
}

// heldLease is a lease taken for one request, with the rule it is for.
type heldLease struct {
	rule  *concRule
	lease portero.Lease
	d     portero.Decision
}

// acquire takes a lease from every rule that applies to r. When one is
// refused, or the store fails, it releases those taken, writes the answer
// and returns false.
func (cfg *concConfig) acquire(w http.ResponseWriter, r *http.Request) ([]heldLease, bool) {
	var req policy.Request
	var route string
	if cfg.Route != nil {
		route = cfg.Route(r)
	}
	cfg.ids.fill(&req, r, route, nil)
	now := cfg.Now()
	var held []heldLease
	for i := range cfg.rules {
		rule := &cfg.rules[i]
		if !rule.Match.Matches(&req) {
			continue
		}
		key, ok := cfg.keys.KeyOf(rule.Key, &rule.Match, &req)
		if !ok {
			continue
		}
		lease, d, err := cfg.Store.Acquire(r.Context(), now, rule.lease, key)
		if err != nil || !d.Allowed {
			if lease != nil {
				held = append(held, heldLease{rule, lease, d}) // a store's lease beside an error: give it back too
			}
			cfg.releaseAll(r, held)
			if err != nil {
				if cfg.OnError != nil {
					cfg.OnError(r, err)
				}
				WriteUnavailable(w, cfg.retry, "the concurrency limiter cannot reach its store")
				return nil, false
			}
			cfg.refuse(w, rule, d)
			return nil, false
		}
		held = append(held, heldLease{rule, lease, d})
	}
	h := w.Header()
	for _, hl := range held {
		h.Add(hRateLimitPolicy, hl.rule.policy)
		h.Add(hRateLimit, string(strconv.AppendInt(append([]byte(hl.rule.quoted), ";r="...), max(hl.d.Remaining, 0), 10)))
	}
	return held, true
}

// refuse answers a request that rule refused: 429 quota-exceeded for a
// client's own limit, 503 temporary-reduced-capacity for the service's,
// with Retry-After and the rule's RateLimit-Policy and RateLimit members.
func (cfg *concConfig) refuse(w http.ResponseWriter, rule *concRule, d portero.Decision) {
	retry := cfg.retry
	if d.RetryAfter > 0 {
		retry = min(retry, d.RetryAfter) // a slot is back by then at the latest
	}
	secs := max(ceilSeconds(retry), 1)
	h := w.Header()
	h.Add(hRateLimitPolicy, rule.policy)
	h.Add(hRateLimit, rule.quoted+";r=0")
	h.Set(hRetryAfter, strconv.FormatInt(secs, 10))
	p := Problem{
		Type:             ProblemQuotaExceeded,
		Title:            "Too Many Requests",
		Status:           http.StatusTooManyRequests,
		Detail:           fmt.Sprintf("rule %q allows %d concurrent requests for this client; retry in %d s", rule.Name, rule.Max, secs),
		ViolatedPolicies: []string{rule.Name},
		RetryAfter:       secs,
	}
	if rule.service {
		p.Type, p.Title, p.Status = ProblemTemporaryReducedCapacity, "Service Unavailable", http.StatusServiceUnavailable
		p.Detail = fmt.Sprintf("rule %q allows %d requests in flight; retry in %d s", rule.Name, rule.Max, secs)
	}
	writeProblem(w, p)
}

// releaseAll gives back every lease in held. The request's context may be
// done already (its client left): the release must still reach the store.
func (cfg *concConfig) releaseAll(r *http.Request, held []heldLease) {
	ctx := context.WithoutCancel(r.Context())
	for _, hl := range held {
		if err := hl.lease.Release(ctx); err != nil && cfg.OnError != nil {
			cfg.OnError(r, err)
		}
	}
}

// keeper renews one request's leases until the request ends. It uses a
// time.AfterFunc timer: no goroutine waits while the request runs, and a
// request shorter than TTL/3 never renews at all.
type keeper struct {
	cfg  *concConfig
	r    *http.Request
	held []heldLease

	mu      sync.Mutex
	done    bool
	lost    []bool
	renewal *time.Timer
}

func (cfg *concConfig) keep(r *http.Request, held []heldLease) *keeper {
	k := &keeper{cfg: cfg, r: r, held: held, lost: make([]bool, len(held))}
	k.mu.Lock() // renew may run before AfterFunc returns
	k.renewal = time.AfterFunc(cfg.every, k.renew)
	k.mu.Unlock()
	return k
}

func (k *keeper) renew() {
	ctx := context.WithoutCancel(k.r.Context())
	for i, hl := range k.held {
		k.mu.Lock()
		skip := k.done || k.lost[i]
		k.mu.Unlock()
		if skip {
			continue
		}
		err := hl.lease.Renew(ctx, k.cfg.Now())
		if err == nil {
			continue
		}
		if errors.Is(err, portero.ErrLeaseLost) {
			k.mu.Lock()
			k.lost[i] = true // gone: renewing it again would fail again
			k.mu.Unlock()
		}
		if k.cfg.OnError != nil {
			k.cfg.OnError(k.r, err)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.done {
		k.renewal.Reset(k.cfg.every)
	}
}

// release stops the renewals and gives the leases back.
func (k *keeper) release() {
	k.mu.Lock()
	k.done = true
	k.renewal.Stop()
	k.mu.Unlock()
	k.cfg.releaseAll(k.r, k.held)
}

// ConcurrencyLimit returns middleware that lets at most n requests run at
// once in this process and answers the rest at once with 503
// (temporary-reduced-capacity, Retry-After: 1): load shedding for the
// service's own sake, so never 429. n ≤ 0 means no limit. It is
// NewConcurrency with one global rule named "in-flight" over a memory
// store; use NewConcurrency for limits per client, tenant or route, or
// shared through Redis.
func ConcurrencyLimit(n int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if n <= 0 {
			return next
		}
		// No sweeper: leases are released by the middleware, and expired
		// ones are dropped by the next acquisition.
		store, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			panic(err) // a constant valid configuration
		}
		c, err := NewConcurrency(ConcurrencyConfig{
			Rules: []ConcurrencyRule{{Name: "in-flight", Key: policy.MustParseKey("global"), Max: int64(n)}},
			Store: store,
		})
		if err != nil {
			panic(err) // a constant valid configuration
		}
		return c.Handler(next)
	}
}
