package policy

import "github.com/portero-rl/portero/engine"

// Limits appends to hits, as check-only hits at the cost Compile gives req,
// the rules that apply to the caller of req (GET /v1/limits): with full,
// as Compile decides for req; without, every rule that selects the caller
// (identity, address) and is not keyed by what a request asks for (route,
// method, host, path, query). Errors are Compile's.
func (p *Policy) Limits(req *Request, full bool, hits []engine.Hit) ([]engine.Hit, error) {
	start := len(hits)
	var keys []byte
	for _, r := range p.rules {
		if full && !r.Match.Matches(req) || !full && (!r.Match.matchesCaller(req) || r.Key.Dependent()) {
			continue
		}
		if r.IsConcurrency() { // a lease cannot be looked at without taking it
			continue
		}
		key, buf, ok := r.Key.key(keys, p, r, req, hits[start:])
		keys = buf
		if !ok {
			continue
		}
		h, err := r.hit(key, req)
		if err != nil {
			return hits, err
		}
		h.CheckOnly = true
		hits = append(hits, h)
	}
	return hits, nil
}

// RuleOf returns the policy rule an engine rule of p was compiled from, or
// nil.
func (p *Policy) RuleOf(er *engine.Rule) *Rule {
	if er == nil || er.Index < 0 || er.Index >= len(p.rules) || p.rules[er.Index].engine != er {
		return nil
	}
	return p.rules[er.Index]
}
