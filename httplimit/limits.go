package httplimit

import (
	"net/http"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/httpanswer"
	"github.com/portero-rl/portero/policy"
)

// Limits looks at the limits that apply to the caller of r, without
// counting anything (policy.Policy.Limits, engine.Engine.Peek), and writes
// the verdict into v: each result says what is available now. With method
// and path, it looks at the rules a request of that method and path would
// meet, as the middleware would compile it; without, at every rule that
// applies to the caller whatever it asks. Each rule is looked at at the
// cost the request would have (policy.Policy.Limits: its reserve, its cost
// header as r carries it). It returns the policy the hits came from, to
// describe them, and a *policy.RuleError for a cost that cannot be read
// (WriteCostError answers it as the middleware does). It is what a client
// asking "what have I left?" is answered with (the gateway's GET
// /v1/limits).
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

// SetLimitsHeaders sets on h the RateLimit-Policy and RateLimit fields of
// a verdict from Limits, written by the middleware's one header writer
// (engine/header), so that every announced rule, calendar quotas among
// them, is its own RateLimit-Policy item, and every rule's state is told
// (engine.Verdict.Look): a look is no refusal, with no Retry-After.
func (l *Limiter) SetLimitsHeaders(h http.Header, v *engine.Verdict) {
	var f httpanswer.Fields
	l.cfg.Load().pre.answer.Fields(&f, v)
	f.Apply(h)
}
