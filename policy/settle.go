package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/portero-rl/portero/algorithm"
	"github.com/portero-rl/portero/engine"
)

// Two kinds of rule are settled after the response (engine.Engine.Settle):
// a rule with Responses counts only the requests whose status is in the set
// (401 from POST /login), checked before and charged after; a rule whose
// cost comes from the response (an upstream's X-Tokens-Used, the body
// bytes) reserves Reserve units at the decision and charges or refunds the
// difference once the response reports the cost.

// Response is what a door tells the policy about a response.
type Response struct {
	// Status is the status code sent.
	Status int
	// Header holds the response's header fields under canonical names.
	Header map[string][]string
	// Bytes is the number of body bytes sent.
	Bytes int64
}

// StatusSet is a set of response status codes: codes such as 401 and
// classes such as 5xx. The zero value is empty.
type StatusSet struct {
	codes   []int
	classes [6]bool
	raw     []string
}

// ParseStatuses reads a set from codes ("401") and classes ("5xx").
func ParseStatuses(list []string) (StatusSet, error) {
	var s StatusSet
	for _, v := range list {
		v = strings.TrimSpace(v)
		if len(v) == 3 && strings.HasSuffix(strings.ToLower(v), "xx") && v[0] >= '1' && v[0] <= '5' {
			s.classes[v[0]-'0'] = true
			s.raw = append(s.raw, strings.ToLower(v))
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 || n > 599 {
			return StatusSet{}, fmt.Errorf("status %q: want a code from 100 to 599 or a class such as 5xx", v)
		}
		s.codes = append(s.codes, n)
		s.raw = append(s.raw, v)
	}
	return s, nil
}

// IsZero reports whether s is empty.
func (s StatusSet) IsZero() bool { return len(s.raw) == 0 }

// Contains reports whether status is in s.
func (s StatusSet) Contains(status int) bool {
	if status >= 100 && status < 600 && s.classes[status/100] {
		return true
	}
	for _, c := range s.codes {
		if c == status {
			return true
		}
	}
	return false
}

// String lists the set as written, such as "401,403".
func (s StatusSet) String() string { return strings.Join(s.raw, ",") }

// AfterResponse reports whether the rule is settled after the response:
// it counts only matching responses, or its cost comes from the response.
func (r *Rule) AfterResponse() bool { return !r.Responses.IsZero() || r.Cost.FromResponse() }

// prepareSettle checks what only a rule settled after the response needs.
func (r *Rule) prepareSettle() error {
	if !r.AfterResponse() {
		if r.Reserve != 0 {
			return fmt.Errorf("reserve %d: only a cost from the response (response-header:NAME, response-bytes) reserves", r.Reserve)
		}
		return nil
	}
	charge, refund := algorithm.CanAdjust(r.Algorithm)
	if !charge {
		return fmt.Errorf("algorithm %s cannot be charged after the response (it holds places, not counts): use another algorithm", r.Algorithm)
	}
	if r.Cost.FromResponse() && r.Responses.IsZero() {
		if !refund {
			return fmt.Errorf("algorithm %s cannot refund a reservation (it logs each unit's instant): use fixed-window, sliding-counter, token-bucket or gcra for a cost from the response", r.Algorithm)
		}
		if r.Reserve == 0 {
			r.Reserve = 1
		}
		if r.Reserve < 0 || r.Reserve > r.maxCost {
			return fmt.Errorf("reserve %d: want 1 to %d, what the rule admits at once", r.Reserve, r.maxCost)
		}
	} else if r.Reserve != 0 {
		return fmt.Errorf("reserve %d: a rule that counts matching responses reserves nothing (it looks before the request, counts after)", r.Reserve)
	}
	return nil
}

// Settlement is a hit waiting for its response: what Policy.Settle needs
// of it once the request has been decided and served.
type Settlement struct {
	rule     *Rule
	key      string
	reserved int64     // units counted at the decision (0: check-only)
	at       time.Time // the decision's instant
}

// Pending appends to out the hits of verdict v (decided at now on hits
// compiled by p) that wait for their response: none when v refused the
// request. A door calls it before it serves the request, and Settle after.
func (p *Policy) Pending(v *engine.Verdict, now time.Time, out []Settlement) []Settlement {
	if !p.settles || !v.Allowed {
		return out
	}
	for i := range v.Results {
		res := &v.Results[i]
		idx := res.Rule.Index
		if idx < 0 || idx >= len(p.rules) || p.rules[idx].engine != res.Rule {
			continue
		}
		r := p.rules[idx]
		switch {
		case !r.Responses.IsZero() && res.Outcome == engine.CheckOnly:
			out = append(out, Settlement{rule: r, key: res.Key, at: now})
		case r.Responses.IsZero() && r.Cost.FromResponse() && (res.Outcome == engine.Allowed || res.Outcome == engine.NearLimit):
			out = append(out, Settlement{rule: r, key: res.Key, reserved: res.Cost, at: now})
		}
	}
	return out
}

// Settle appends to adj the adjustments that resp calls for on pending:
// for a rule of Responses, its cost charged when the status matches; for a
// cost from the response, the difference from the reservation. Errors
// (a malformed cost in the response, as *RuleError wrapping ErrBadCost)
// leave that rule's reservation as it was and do not stop the others.
func (p *Policy) Settle(pending []Settlement, req *Request, resp *Response, adj []engine.Adjustment) ([]engine.Adjustment, error) {
	var firstErr error
	for _, s := range pending {
		r := s.rule
		if !r.Responses.IsZero() {
			if !r.Responses.Contains(resp.Status) {
				continue
			}
			var cost int64
			var err error
			if r.Cost.FromResponse() {
				var ok bool
				if cost, ok, err = r.Cost.ofResponse(resp); err == nil && !ok {
					cost = 1
				}
			} else {
				cost, err = r.Cost.of(req)
			}
			if err != nil {
				firstErr = cmpErr(firstErr, &RuleError{Rule: r.Name, Err: err})
				continue
			}
			if cost > 0 {
				adj = append(adj, engine.Adjustment{Rule: r.engine, Key: s.key, Delta: cost, At: s.at})
			}
			continue
		}
		cost, ok, err := r.Cost.ofResponse(resp)
		if err != nil {
			firstErr = cmpErr(firstErr, &RuleError{Rule: r.Name, Err: err})
			continue
		}
		if ok && cost != s.reserved {
			adj = append(adj, engine.Adjustment{Rule: r.engine, Key: s.key, Delta: cost - s.reserved, At: s.at})
		}
	}
	return adj, firstErr
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// Settles reports whether some rule of p is settled after the response, so
// that a door knows whether to watch responses at all.
func (p *Policy) Settles() bool { return p.settles }
