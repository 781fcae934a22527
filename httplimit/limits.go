package httplimit

import (
	"net/http"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/httpanswer"
	"github.com/portero-rl/portero/policy"
)

// Limits looks at the limits that apply to the caller of r, counting
// nothing (policy.Policy.Limits, engine.Engine.Peek), into v: with method
// and path, the rules a request of those would meet; without, every rule
// that applies to the caller. It returns the policy the hits came from, and
// a *policy.RuleError for a cost that cannot be read. It answers GET
// /v1/limits.
func (l *Limiter) Limits(r *http.Request, method, path string, v *engine.Verdict) (*policy.Policy, error) {
	cfg := l.cfg.Load()
	pr := &policy.Request{}
	cfg.fill(pr, r, "", nil)
	full := method != "" || path != ""
	if full {
		if method != "" {
			pr.Method = method
		}
		if path != "" {
			pr.Path = path
		}
	}
	hits, err := cfg.Policy.Limits(pr, full, nil)
	if err != nil {
		return cfg.Policy, err
	}
	return cfg.Policy, cfg.engine.Peek(r.Context(), cfg.Now(), hits, v)
}

// SetLimitsHeaders sets on h the RateLimit fields of a verdict from Limits:
// every rule's state, and no Retry-After (engine.Verdict.Look).
func (l *Limiter) SetLimitsHeaders(h http.Header, v *engine.Verdict) {
	var f httpanswer.Fields
	l.cfg.Load().pre.answer.Fields(&f, v)
	f.Apply(h)
}
