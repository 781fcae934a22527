package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
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
// A request refused so, or whose client leaves during its hold, gives back
// what it counted (its places, its other rules' hits: counted), so that it
// counts in no rule.

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
// would outlast its bound, queueDelay returns -1 (see refuseQueued).
func queueDelay(v *engine.Verdict, pre *prepared, left time.Duration, hasDeadline bool) time.Duration {
	var d time.Duration
	for i := range v.Results {
		res := &v.Results[i]
		if res.Rule.Shadow || res.Decision.Delay == 0 {
			continue
		}
		sh := pre.shapeOf(res.Rule.Index)
		h := sh.Hold(res.Decision.Delay, res.Rule.Limit.Interval())
		if bound, ok := sh.Bound(left, hasDeadline); ok && h > bound {
			return -1
		}
		d = max(d, h)
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
// the RetryAfter after which the same request would be held within the
// same bound. What v counted is given back first (a refused request counts
// in no rule): every such hit becomes NotCounted. When the store could
// not give it back, the request's own places stay taken and RetryAfter is
// the wait of a request queued behind them.
func refuseQueued(cfg *Config, r *http.Request, v *engine.Verdict, now time.Time, left time.Duration, hasDeadline bool) {
	back := counted(v, now)
	kept := len(back) > 0 && !refund(cfg, r, back)
	for i := range v.Results {
		if res := &v.Results[i]; !kept && refundable(res) {
			res.Outcome = engine.NotCounted
			res.Decision.Remaining = min(res.Decision.Remaining+res.Cost, res.Decision.Limit)
		}
	}
	pre := cfg.pre
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
		var own time.Duration
		if kept {
			own = time.Duration(res.Cost) * interval
		}
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

// counted returns, as refunds of the decision at at, the hits of the
// admitted verdict v that the store counted: what a held request gives
// back when its client leaves before its departure, so that it counts in
// no rule, as a refused request. Its queue places are among them; its
// leases are not (the keeper releases them), nor hits the failure policy
// decided (the store counted nothing), nor a sliding log's, which cannot
// be refunded (it keeps the instant of every unit).
func counted(v *engine.Verdict, at time.Time) []engine.Adjustment {
	var adj []engine.Adjustment
	for i := range v.Results {
		if res := &v.Results[i]; refundable(res) {
			adj = append(adj, engine.Adjustment{Rule: res.Rule, Key: res.Key, Delta: -res.Cost, At: at})
		}
	}
	return adj
}

// refundable reports whether counted gives res back.
func refundable(res *engine.Result) bool {
	if res.Outcome != engine.Allowed && res.Outcome != engine.NearLimit || res.Failure != "" || res.Rule.IsConcurrency() {
		return false
	}
	_, ok := algorithm.CanAdjust(res.Rule.Algorithm)
	return ok
}

// refund gives back adj (counted) for r, whose context may be done, and
// reports whether the store did.
func refund(cfg *Config, r *http.Request, adj []engine.Adjustment) bool {
	err := cfg.engine.Settle(context.WithoutCancel(r.Context()), cfg.Now(), adj)
	// A store without Adjust keeps what it counted, as it always has.
	if err != nil && !errors.Is(err, portero.ErrNotAdjustable) && cfg.OnError != nil {
		cfg.OnError(r, err)
	}
	return err == nil
}
