package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// Concurrency limits: where a rate limit counts what arrived, a
// concurrency limit counts what has not finished, so it tightens on its own
// when the service slows down (Little's law: C requests in flight that take
// S seconds each admit at most C/S per second). They are rules of the
// policy (policy.Rule.Concurrency), decided by the Limiter through the
// engine with the rate rules (lease.go); Concurrency is a Limiter whose
// policy has concurrency rules only, for a service that wants no rate
// limit.

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
	// OnError, when not nil, is called when the store fails: an
	// acquisition (OnStoreError answers), a renewal or a release.
	OnError func(r *http.Request, err error)
	// OnStoreError is the failure policy when the store fails, as in
	// Config (empty means FailAllow, as everywhere); a limit that protects
	// a resource sets FailDeny.
	OnStoreError portero.FailurePolicy
	// Queues lets refused requests wait for a slot, by rule name, as in
	// Config.
	Queues map[string]overload.Queue
}

// Concurrency is the concurrency-limit middleware: a Limiter (see
// Config) whose policy holds only the concurrency rules of a
// ConcurrencyConfig. It is safe for concurrent use, and its configuration
// can be replaced while it serves (Update): requests in flight keep the
// leases they took. To limit rates and concurrency together, put both kinds
// of rules in one Limiter's policy instead of stacking two middlewares:
// the RateLimit fields of both then come from one writer, in one response.
type Concurrency struct {
	l *Limiter
}

// NewConcurrency validates cfg and returns the middleware.
func NewConcurrency(cfg ConcurrencyConfig) (*Concurrency, error) {
	lc, err := cfg.limiterConfig()
	if err != nil {
		return nil, err
	}
	l, err := New(lc)
	if err != nil {
		return nil, err
	}
	return &Concurrency{l: l}, nil
}

// Update replaces the configuration; an invalid cfg is refused and the old
// one kept. Leases belong to a rule's name: a rule whose Max changes keeps
// the leases already held, and admits again once fewer than the new Max are.
func (c *Concurrency) Update(cfg ConcurrencyConfig) error {
	lc, err := cfg.limiterConfig()
	if err != nil {
		return err
	}
	return c.l.Update(lc)
}

// Handler wraps next: the standard middleware shape.
func (c *Concurrency) Handler(next http.Handler) http.Handler { return c.l.Handler(next) }

// limiterConfig is cfg as a Limiter's configuration.
func (cfg ConcurrencyConfig) limiterConfig() (Config, error) {
	if cfg.Store == nil {
		return Config{}, errors.New("httplimit: ConcurrencyConfig.Store is required")
	}
	rules := make([]policy.Rule, len(cfg.Rules))
	for i, r := range cfg.Rules {
		// Named, so that a Max of 0 is reported as a concurrency rule's.
		rules[i] = policy.Rule{Name: r.Name, Match: r.Match, Key: r.Key, Concurrency: portero.ConcurrencyRule{Name: r.Name, Max: r.Max, TTL: r.TTL}}
	}
	p, err := policy.New(rules, cfg.KeyOptions)
	if err != nil {
		return Config{}, fmt.Errorf("httplimit: concurrency %w", err)
	}
	st, ok := cfg.Store.(portero.Store)
	if !ok {
		st = leasesOnly{}
	}
	return Config{Policy: p, Store: st, Leases: cfg.Store, ClientIP: cfg.ClientIP, UserHeader: cfg.UserHeader,
		TenantHeader: cfg.TenantHeader, Route: cfg.Route, Now: cfg.Now, OnError: cfg.OnError, OnStoreError: cfg.OnStoreError,
		LeaseRetryAfter: cfg.RetryAfter, Queues: cfg.Queues}, nil
}

// leasesOnly is the rate store of a Concurrency over a store that keeps
// leases only: its policy has no rate rule, so the engine never asks it.
type leasesOnly struct{}

var errLeasesOnly = errors.New("httplimit: this store keeps leases only")

func (leasesOnly) AllowAll(context.Context, time.Time, []portero.Hit) ([]portero.Decision, error) {
	return nil, errLeasesOnly
}

func (leasesOnly) Peek(context.Context, portero.Rule, string, time.Time, int64) (portero.Decision, error) {
	return portero.Decision{}, errLeasesOnly
}

func (leasesOnly) Close(context.Context) error { return nil }

// ConcurrencyLimit returns middleware that lets at most n requests run at
// once in this process and answers the rest at once with 503
// (temporary-reduced-capacity, Retry-After: 1): load shedding for the
// service's own sake, so never 429. n ≤ 0 means no limit. It is Shed over
// an overload.Gate with MaxInFlight n and no queue — the one mechanism of
// a process-wide cap; use a Gate and Shed directly for priorities, a queue
// or fair shedding, and concurrency rules (NewConcurrency, or
// policy.Rule.Concurrency in a Limiter) for limits per client, tenant or
// route, or shared through Redis.
func ConcurrencyLimit(n int) func(http.Handler) http.Handler {
	if n <= 0 {
		return func(next http.Handler) http.Handler { return next }
	}
	g, err := overload.New(overload.Config{MaxInFlight: n})
	if err != nil {
		panic(err) // n ≥ 1 is a valid configuration
	}
	shed, err := Shed(ShedConfig{Gate: g})
	if err != nil {
		panic(err) // a Gate is all it needs
	}
	return shed
}
