package algorithm

import "github.com/portero-rl/portero"

// Look returns what a request of cost would get from s at now, taking
// nothing: Allowed, RetryAfter, Delay, Quota and PeriodLeft as Decide
// answers that request, and Remaining and ResetAfter as they stand now —
// Decide's for a cost of 0 — rather than as the request would leave them.
// It is a store's Peek (portero.Store), the one answer to "what would the
// next request get, and what is left" that every door reports, so that
// what a client is told equals what its next request then gets. cost is 0
// or has passed CheckCost.
func Look(d Decider, s State, found bool, now, cost int64) portero.Decision {
	_, dec := d.Decide(s, found, now, cost)
	if dec.Allowed && cost > 0 {
		_, at := d.Decide(s, found, now, 0)
		dec.Remaining, dec.ResetAfter = at.Remaining, at.ResetAfter
	}
	return dec
}

// Look is the package's Look for the sliding log: what a request of cost
// would get from l at now, with Remaining and ResetAfter as they stand
// now. It records nothing; like Decide it prunes l of what has expired at
// now.
func (a *SlidingLog) Look(l *Log, now, cost int64) portero.Decision {
	dec := a.Decide(l, now, cost)
	if dec.Allowed && cost > 0 {
		at := a.Decide(l, now, 0)
		dec.Remaining, dec.ResetAfter = at.Remaining, at.ResetAfter
	}
	return dec
}
