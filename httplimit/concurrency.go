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

// A concurrency limit counts what has not finished, so it tightens on its
// own when the service slows down (Little's law: C requests in flight of S
// seconds each admit at most C/S per second). Concurrency is a Limiter
// whose policy has concurrency rules only.

// ConcurrencyRule is one concurrency limit of a Concurrency middleware: at
// most Max requests in flight at once per key.
type ConcurrencyRule struct {
	// Name identifies the rule (policy.ValidName); rules of one name share
	// their leases.
	Name string
	// Match selects the requests the rule applies to; the zero value all.
	Match policy.Match
	// Key says under which name requests are counted, as for a rate rule.
	// Required. A key that names the client is its own limit (429); any
	// other the service's (503).
	Key policy.Key
	// Max is C, the most requests in flight per key. Required.
	Max int64
	// TTL is the lease's lifetime without renewal; 0 means
	// portero.DefaultLeaseTTL.
	TTL time.Duration
}

// ConcurrencyConfig configures a Concurrency middleware. Rules and Store
// are required; every other field's zero value is the documented default.
type ConcurrencyConfig struct {
	// Rules are tried in order, all or nothing: put the clients' own rules
	// first, so that a client over its share is told so (429) before it
	// takes a slot of the service's.
	Rules []ConcurrencyRule
	// Store hands out the leases (store/redisstore shares the limit among
	// instances). Required; the middleware does not close it.
	Store portero.LeaseStore
	// ClientIP, UserHeader, TenantHeader and Route find the keys' parts, as
	// in Config.
	ClientIP                 ClientIP
	UserHeader, TenantHeader string
	Route                    func(*http.Request) string
	// KeyOptions group client addresses in ip keys (policy.Options).
	KeyOptions policy.Options
	// RetryAfter is the Retry-After of a refusal; 0 means 1 s.
	RetryAfter time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnError, when not nil, is told when the store fails.
	OnError func(r *http.Request, err error)
	// OnStoreError is the failure policy when the store fails, as in
	// Config (empty means FailAllow, as everywhere); a limit that protects
	// a resource sets FailDeny.
	OnStoreError portero.FailurePolicy
	// Queues lets refused requests wait for a slot, as in Config.
	Queues map[string]overload.Queue
}

// Concurrency is the concurrency-limit middleware: a Limiter whose policy
// holds only a ConcurrencyConfig's rules, safe for concurrent use. To limit
// rates and concurrency together, put both in one Limiter's policy.
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

// Update replaces the configuration, as Limiter.Update does.
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

// leasesOnly is the rate store of a Concurrency over a store of leases
// only, which the engine never asks.
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
// once in this process and answers the rest with 503, never 429; n ≤ 0 is
// no limit. It is Shed over an overload.Gate of MaxInFlight n: use a Gate
// for priorities or a queue, and concurrency rules for limits per key.
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
