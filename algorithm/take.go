package algorithm

import (
	"fmt"

	"github.com/portero-rl/portero"
)

// Taking a budget. An instance that serves a rule from memory
// (portero.Rule.Budget, store/budget) takes a batch of units from a key's
// shared state in one step: as many as the state admits now, up to what
// it asks for, and, beyond what its request needs, at most a TakeShare-th
// of what is left, so that batches shrink as the state runs low and the
// last units go one request at a time, as without budgets. The state
// after a take is the state after one request of the units taken: the
// stores need no new arithmetic, and the Redis script (lua/take.lua)
// mirrors Take line for line.

// TakeShare is the share of what a key has left beyond its need that one
// take may grant: an eighth.
const TakeShare = 8

// Grant returns how many units a take of need to want units gets from a
// state with rem units left: 0 when rem < need, else between need and
// want, and beyond need at most rem/TakeShare.
func Grant(rem, need, want int64) int64 {
	if rem < need {
		return 0
	}
	return max(need, min(want, rem/TakeShare))
}

// Take takes between need and want units (1 ≤ need ≤ want, need at most
// d.MaxCost()) from s at now: it returns the state after the take, the
// units taken (Grant of what stands now) and the decision of a request of
// that many units; when nothing is taken, s unchanged and the refusal of
// a request of need.
func Take(d Decider, s State, found bool, now, need, want int64) (State, int64, portero.Decision) {
	_, at := d.Decide(s, found, now, 0)
	k := Grant(at.Remaining, need, min(want, d.MaxCost()))
	if k == 0 {
		_, dec := d.Decide(s, found, now, need)
		return s, 0, dec
	}
	st, dec := d.Decide(s, found, now, k)
	return st, k, dec
}

// CheckTake reports a take that rule cannot make: an algorithm that does
// not lease (portero.Leasable, wrapping portero.ErrInvalidLimit), a need
// that is no valid cost (CheckCost), or want below need. Every store
// checks it before it changes anything.
func CheckTake(rule portero.Rule, need, want, maxCost int64) error {
	if !portero.Leasable(rule.Algorithm) {
		return fmt.Errorf("rule %q: %w: %s cannot lease budgets", rule.Name, portero.ErrInvalidLimit, rule.Algorithm)
	}
	if err := CheckCost(need, maxCost); err != nil {
		return fmt.Errorf("rule %q: take: %w", rule.Name, err)
	}
	if want < need {
		return fmt.Errorf("rule %q: take: %w: want %d below need %d", rule.Name, portero.ErrInvalidCost, want, need)
	}
	return nil
}
