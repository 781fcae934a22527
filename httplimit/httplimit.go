// Package httplimit is Portero's net/http middleware. It has the standard
// shape func(http.Handler) http.Handler, so chi, gin (through its
// WrapH/adapter), echo (echo.WrapMiddleware) and plain net/http can use it.
//
// For each request it finds the client (ClientIP), builds a policy.Request,
// asks the policy for a verdict — before the handler runs and before the
// body is read — and then either answers for itself or passes the request
// on:
//
//   - refused by a rule: 429 Too Many Requests, Retry-After in whole seconds
//     rounded up (at least 1), Cache-Control: no-store, and an
//     application/problem+json body of type quota-exceeded naming the
//     violated policies;
//   - refused for the service's own sake (store down with FailClosed, or
//     ConcurrencyLimit full): 503 Service Unavailable of type
//     temporary-reduced-capacity — never 429, since the client did nothing
//     wrong;
//   - a cost that cannot be used: 400, 411 or 413 naming the rule and header;
//   - allowed: the handler runs, with RateLimit-Policy and RateLimit
//     (draft-ietf-httpapi-ratelimit-headers-11) added to its response.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
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
	// FailClosed refuses requests with 503 when the store fails. The default
	// (false) lets them pass: a broken limiter should not take the service
	// down with it.
	FailClosed bool
	// OnDecision, when not nil, is called after every evaluation with the
	// verdict and the time the store took; it must be fast and safe for
	// concurrent use (metrics, logs).
	OnDecision func(r *http.Request, v *policy.Verdict, storeTime time.Duration)
	// OnError, when not nil, is called when a request could not be
	// evaluated: a store failure or an unusable cost.
	OnError func(r *http.Request, err error)
}

// Limiter is the middleware. It is safe for concurrent use, and its
// configuration can be replaced while it serves (Update), which is how the
// gateway reloads.
type Limiter struct {
	cfg atomic.Pointer[Config]
}

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	l := &Limiter{}
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
// finish with the old one. An invalid cfg is refused and the old one kept.
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l.cfg.Store(&cfg)
	return nil
}

// Config returns the configuration in use. The caller must not change it.
func (l *Limiter) Config() *Config { return l.cfg.Load() }

type identityKey struct{}

// WithIdentity returns a copy of ctx carrying an identity value, such as
// ("user", "alice") or ("tenant", "acme"), for keys with a user, tenant or
// identity:NAME part. Authentication middleware that runs before the
// limiter calls it: r = r.WithContext(httplimit.WithIdentity(r.Context(),
// "user", id)).
func WithIdentity(ctx context.Context, name, value string) context.Context {
	old, _ := ctx.Value(identityKey{}).(map[string]string)
	m := make(map[string]string, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = value
	return context.WithValue(ctx, identityKey{}, m)
}

// Identity returns the identity values set with WithIdentity; nil when none.
func Identity(ctx context.Context) map[string]string {
	m, _ := ctx.Value(identityKey{}).(map[string]string)
	return m
}

// Request builds the policy.Request for r under cfg.
func (cfg *Config) Request(r *http.Request) *policy.Request {
	pr := &policy.Request{
		Method:        r.Method,
		Host:          r.Host,
		Path:          r.URL.Path,
		Header:        r.Header,
		ClientIP:      cfg.ClientIP.Resolve(r),
		ContentLength: r.ContentLength,
		Identity:      Identity(r.Context()),
	}
	if cfg.UserHeader != "" || cfg.TenantHeader != "" {
		id := make(map[string]string, len(pr.Identity)+2)
		if v := r.Header.Get(cfg.UserHeader); cfg.UserHeader != "" && v != "" {
			id["user"] = v
		}
		if v := r.Header.Get(cfg.TenantHeader); cfg.TenantHeader != "" && v != "" {
			id["tenant"] = v
		}
		for k, v := range pr.Identity {
			id[k] = v
		}
		pr.Identity = id
	}
	if cfg.Route != nil {
		pr.Route = cfg.Route(r)
	}
	return pr
}

// Handler wraps next: the standard middleware shape.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := l.cfg.Load()
		pr := cfg.Request(r)
		now := cfg.Now()
		start := time.Now()
		v, err := cfg.Policy.Evaluate(r.Context(), cfg.Store, now, pr)
		took := time.Since(start)
		if err != nil {
			if cfg.OnError != nil {
				cfg.OnError(r, err)
			}
			var re *policy.RuleError
			switch {
			case errors.As(err, &re):
				writeCostError(w, re)
			case cfg.FailClosed:
				WriteUnavailable(w, time.Second, "the rate limiter cannot reach its store")
			default:
				next.ServeHTTP(w, r) // fail open
			}
			return
		}
		if cfg.OnDecision != nil {
			cfg.OnDecision(r, v, took)
		}
		h := w.Header()
		SetHeaders(h, v, cfg.LegacyHeaders)
		if !v.Allowed {
			writeRefusal(w, v)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ConcurrencyLimit returns middleware that lets at most n requests run at
// once and answers the rest at once with 503 (temporary-reduced-capacity,
// Retry-After: 1): load shedding for the service's own sake, so never 429.
// n ≤ 0 means no limit.
func ConcurrencyLimit(n int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if n <= 0 {
			return next
		}
		sem := make(chan struct{}, n)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
				next.ServeHTTP(w, r)
			default:
				WriteUnavailable(w, time.Second, fmt.Sprintf("more than %d requests in flight", n))
			}
		})
	}
}
