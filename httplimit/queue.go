package httplimit

import (
	"context"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// Queueing: a rule whose algorithm is a queue (leaky-queue) admits a
// request with a Decision.Delay, the time until its place in the queue
// departs, and the middleware holds the request until then before the
// handler runs — less the places its overload.Shape lets pass at once
// (Config.Shapes, nginx's delay=N). The hold is bounded by the request's
// context and by the shape's MaxDelay: when it would outlast its bound, the
// request is refused at once, as the rule refuses a full queue, rather than
// after waiting in vain. This is the one place where the middleware waits.

// setShapes resolves shapes by rule name into pre.shape, by rule index.
func (pre *prepared) setShapes(p *policy.Policy, shapes map[string]overload.Shape) error {
	pre.shape = nil
	if len(shapes) == 0 {
		return nil
	}
	pre.shape = make([]overload.Shape, len(p.Rules()))
	for name, sh := range shapes {
		r := p.Rule(name)
		switch {
		case r == nil:
			return fmt.Errorf("httplimit: Shapes[%q]: no such rule", name)
		case r.StoreRule().Algorithm != portero.LeakyQueue:
			return fmt.Errorf("httplimit: Shapes[%q]: the rule is %s; only a %s rule shapes", name, r.StoreRule().Algorithm, portero.LeakyQueue)
		}
		if err := sh.Validate(); err != nil {
			return fmt.Errorf("httplimit: Shapes[%q]: %w", name, err)
		}
		pre.shape[r.Index()] = sh
	}
	return nil
}

// shapeOf returns the shape of rule index i (the zero Shape when none).
func (pre *prepared) shapeOf(i int) overload.Shape {
	if i < len(pre.shape) {
		return pre.shape[i]
	}
	return overload.Shape{}
}

// queueDelay returns how long v's request must be held: the longest hold
// among its enforced rules (shadow rules never hold a request), each its
// Decision.Delay as its shape reads it. left is the time until the
// request's deadline, hasDeadline whether it has one. When a rule's hold
// would outlast its bound, v becomes the refusal of every such rule and
// queueDelay returns -1.
func queueDelay(v *engine.Verdict, pre *prepared, left time.Duration, hasDeadline bool) time.Duration {
	var d time.Duration
	refused := false
	for i := range v.Results {
		res := &v.Results[i]
		if res.Rule.Shadow || res.Decision.Delay == 0 {
			continue
		}
		sh := pre.shapeOf(res.Rule.Index)
		h := sh.Hold(res.Decision.Delay, res.Rule.Limit.Interval())
		if bound, ok := sh.Bound(left, hasDeadline); ok && h > bound {
			refused = true
		}
		d = max(d, h)
	}
	if refused {
		refuseQueued(v, pre, left, hasDeadline)
		return -1
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

// refuseQueued turns v, allowed with a hold longer than its bound, into
// the refusal of the queue rules whose hold exceeds their bound, each with
// the RetryAfter after which the same request, joining the queue behind the
// place this one keeps (a queue cannot give a place back through the Store
// interface), would be held within the same bound.
func refuseQueued(v *engine.Verdict, pre *prepared, left time.Duration, hasDeadline bool) {
	v.Allowed = false
	v.Violated = v.Violated[:0]
	for i := range v.Results {
		res := &v.Results[i]
		if res.Rule.Shadow || res.Decision.Delay == 0 {
			continue
		}
		sh := pre.shapeOf(res.Rule.Index)
		interval := res.Rule.Limit.Interval()
		h := sh.Hold(res.Decision.Delay, interval)
		bound, ok := sh.Bound(left, hasDeadline)
		if !ok || h <= bound {
			continue
		}
		own := time.Duration(res.Cost) * interval
		res.Decision.Allowed = false
		res.Decision.RetryAfter = max(h+own-bound, time.Millisecond)
		res.Decision.Delay = 0
		res.Outcome = engine.Refused
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
