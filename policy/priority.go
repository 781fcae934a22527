package policy

import (
	"fmt"
	"slices"

	"github.com/portero-rl/portero/overload"
)

// PriorityRule gives the requests that Match selects a priority class, for
// an overload.Gate's shedding.
type PriorityRule struct {
	Match    Match
	Priority overload.Priority
}

// Priorities is a compiled list of priority rules: a request's class is the
// Priority of the first rule whose Match selects it, for the doors that
// shed. It is immutable and safe for concurrent use.
type Priorities struct {
	rules    []PriorityRule
	fallback overload.Priority
}

// NewPriorities compiles rules; fallback is the class of a request no rule
// selects. A Match that does not compile is an error naming the rule.
func NewPriorities(rules []PriorityRule, fallback overload.Priority) (*Priorities, error) {
	p := &Priorities{rules: make([]PriorityRule, len(rules)), fallback: fallback}
	for i, rule := range rules {
		p.rules[i] = rule
		if err := p.rules[i].Match.Compile(); err != nil {
			return nil, fmt.Errorf("priority rule %d (%s): %w", i, rule.Priority, err)
		}
	}
	return p, nil
}

// Of returns the class of req.
func (p *Priorities) Of(req *Request) overload.Priority {
	for i := range p.rules {
		if p.rules[i].Match.Matches(req) {
			return p.rules[i].Priority
		}
	}
	return p.fallback
}

// Headers returns the header names the rules' matches read, each once:
// what a door without an http.Header (gRPC) copies into Request.Header.
func (p *Priorities) Headers() []string {
	var out []string
	for i := range p.rules {
		for name := range p.rules[i].Match.Headers {
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}
