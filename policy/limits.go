package policy

import "github.com/portero-rl/portero/engine"

// Limits appends to hits, as check-only hits, the rules that apply to the
// caller of req: what a client asking "what have I left?" is told (the
// gateway's GET /v1/limits). With full, a rule applies as Compile decides
// (req is the request the caller asks about: its method and path); without
// it, every rule whose caller part selects the caller (its identity, its
// address) and whose key has a value for it, whatever the request — except
// rules keyed by what the request asks for (route, method, host, path,
// query), whose key only a full request names. Each hit has the cost
// Compile gives req (a rule's reserve, a cost header of req), so that a
// look tells what that request would get. It counts nothing and decides
// nothing; errors are Compile's, for a cost that cannot be read.
func (p *Policy) Limits(req *Request, full bool, hits []engine.Hit) ([]engine.Hit, error) {
	start := len(hits)
	var keys []byte
	for _, r := range p.rules {
		if full && !r.Match.Matches(req) || !full && (!r.Match.matchesCaller(req) || r.Key.Dependent()) {
			continue
		}
		if r.IsConcurrency() {
			// Work in flight is no quota left to report, and a lease
			// cannot be looked at without taking it.
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
