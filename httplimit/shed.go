package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// ShedConfig configures Shed. Gate is required; every other field's zero
// value is the documented default.
type ShedConfig struct {
	// Gate decides; share one between the doors to the same capacity.
	// Required.
	Gate *overload.Gate
	// Priority gives each request its class (PriorityByRule); nil means
	// overload.Default. It runs first: cheap, and never reading the body.
	Priority func(*http.Request) overload.Priority
	// Tenant names each request's tenant for fair shedding; nil means one
	// for all. Shedding comes before authentication: what it reads is a
	// claim, good enough to share capacity, not to trust.
	Tenant func(*http.Request) string
	// Timeout, when not zero, bounds a request's wait from its arrival, as
	// its context's deadline does.
	Timeout time.Duration
	// OnRefuse, when not nil, is called for every refusal; it must be fast
	// and safe for concurrent use.
	OnRefuse func(r *http.Request, ref *overload.Refusal)
}

// Shed returns middleware that sheds load for the service's own sake: each
// request asks cfg.Gate for a slot before anything after it runs, may wait
// in its queue, and is answered 503 temporary-reduced-capacity with
// Retry-After when refused, never 429. The slot is given back however the
// handler returns. Put it outermost.
func Shed(cfg ShedConfig) (func(http.Handler) http.Handler, error) {
	s, err := NewShedder(cfg)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.Serve(w, r, next) })
	}, nil
}

// Shedder is Shed's middleware as a value, for callers that choose the
// next handler per request (a gateway); it is safe for concurrent use.
type Shedder struct {
	cfg ShedConfig
}

// NewShedder validates cfg and returns a Shedder.
func NewShedder(cfg ShedConfig) (*Shedder, error) {
	if cfg.Gate == nil {
		return nil, errors.New("httplimit: ShedConfig.Gate is required")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("httplimit: ShedConfig.Timeout is %v: want zero or more", cfg.Timeout)
	}
	return &Shedder{cfg: cfg}, nil
}

// Gate returns the Gate the Shedder asks.
func (s *Shedder) Gate() *overload.Gate { return s.cfg.Gate }

// Serve asks the Gate for a slot for r, then calls next and gives the slot
// back when it returns, or answers the refusal itself (see Shed).
func (s *Shedder) Serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	cfg := &s.cfg
	req := overload.Request{}
	if cfg.Priority != nil {
		req.Priority = cfg.Priority(r)
	}
	if cfg.Tenant != nil {
		req.Tenant = cfg.Tenant(r)
	}
	if cfg.Timeout > 0 {
		req.Deadline = time.Now().Add(cfg.Timeout)
	}
	t, err := cfg.Gate.Acquire(r.Context(), req)
	if err != nil {
		var ref *overload.Refusal
		if !errors.As(err, &ref) { // the client left while it waited
			WriteUnavailable(w, cfg.Gate.Config().RetryAfter, "the request ended while it waited for capacity")
			return
		}
		if cfg.OnRefuse != nil {
			cfg.OnRefuse(r, ref)
		}
		WriteUnavailable(w, ref.RetryAfter, ref.Detail())
		return
	}
	defer cfg.Gate.Release(t)
	next.ServeHTTP(w, r)
}

// PriorityRule gives the requests that Match selects a priority class
// (policy.PriorityRule, shared with the gRPC door).
type PriorityRule = policy.PriorityRule

// PriorityByRule returns a ShedConfig.Priority that gives each request the
// priority of the first rule whose Match selects it (method, host, path,
// headers), or fallback.
func PriorityByRule(rules []PriorityRule, fallback overload.Priority) (func(*http.Request) overload.Priority, error) {
	ps, err := policy.NewPriorities(rules, fallback)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	return func(r *http.Request) overload.Priority {
		return ps.Of(&policy.Request{Method: r.Method, Host: r.Host, Path: r.URL.Path, Header: r.Header})
	}, nil
}
