package policy

import "github.com/portero-rl/portero/engine"

// Compile appends to hits the engine's input for req: one hit per rule that
// applies, in rule order, with its key and cost (a cost a rule can never
// admit as it is). keys is scratch memory, returned for reuse; a key is a
// fresh string unless an earlier hit of the call has it or it is constant.
// Errors are *RuleError for a cost that cannot be read.
func (p *Policy) Compile(req *Request, hits []engine.Hit, keys []byte) ([]engine.Hit, []byte, error) {
	start := len(hits)
	for _, r := range p.rules {
		if !r.Match.Matches(req) {
			continue
		}
		key, buf, ok := r.Key.key(keys, p, r, req, hits[start:])
		keys = buf
		if !ok {
			continue
		}
		h, err := r.hit(key, req)
		if err != nil {
			return hits, keys, err
		}
		hits = append(hits, h)
	}
	return hits, keys, nil
}

// hit is r's hit for req under key: its cost, or, for a rule settled after
// the response, what it takes now. Errors are *RuleError for a cost that
// cannot be read.
func (r *Rule) hit(key string, req *Request) (engine.Hit, error) {
	if r.AfterResponse() {
		// Settled after the response: a rule of matching responses only
		// looks now; a cost from the response reserves.
		if r.Responses.IsZero() {
			return engine.Hit{Rule: r.engine, Key: key, Cost: r.Reserve}, nil
		}
		return engine.Hit{Rule: r.engine, Key: key, Cost: 1, CheckOnly: true}, nil
	}
	cost, err := r.Cost.of(req)
	if err != nil {
		return engine.Hit{}, &RuleError{Rule: r.Name, Err: err}
	}
	return engine.Hit{Rule: r.engine, Key: key, Cost: cost}, nil
}
