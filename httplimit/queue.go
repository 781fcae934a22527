package httplimit

import (
	"context"
	"time"

	"github.com/portero-rl/portero/policy"
)

// Queueing: a rule whose algorithm is a queue (leaky-queue) admits a
// request with a Decision.Delay, the time until its place in the queue
// departs, and the middleware holds the request that long before the
// handler runs. The request's context bounds the wait: when its deadline
// would pass first, the request is refused at once, as the rule refuses a
// full queue, rather than after waiting in vain. This is the one place
// where the middleware waits; shaping modes build on queueDelay and hold.

// queueDelay returns how long v's request must wait for its departure: the
// longest Delay among its enforced rules (shadow rules never hold a
// request).
func queueDelay(v *policy.Verdict) time.Duration {
	var d time.Duration
	for i := range v.Results {
		if res := &v.Results[i]; !res.Rule.Shadow() {
			d = max(d, res.Decision.Delay)
		}
	}
	return d
}

// budget returns how long ctx lets its request wait, and false when it has
// no deadline.
func budget(ctx context.Context) (time.Duration, bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	return time.Until(dl), true
}

// refuseQueued turns v, allowed with a wait longer than the request's
// budget, into the refusal of the queue rules whose Delay exceeds it, each
// with the RetryAfter after which the same request, joining the queue
// behind the place this one keeps (a queue cannot give a place back
// through the Store interface), would depart within the same budget.
func refuseQueued(v *policy.Verdict, left time.Duration) {
	v.Allowed = false
	v.Violated = v.Violated[:0]
	for i := range v.Results {
		res := &v.Results[i]
		if res.Rule.Shadow() || res.Decision.Delay <= left {
			continue
		}
		own := time.Duration(res.Cost) * res.Rule.StoreRule().Limit.Interval()
		res.Decision.Allowed = false
		res.Decision.RetryAfter = max(res.Decision.Delay+own-left, time.Millisecond)
		res.Decision.Delay = 0
		res.Outcome = policy.Refused
		v.Violated = append(v.Violated, i)
	}
}

// hold waits d, the request's departure, and reports false when ctx ends
// first (the client went away).
func hold(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
