package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// Queueing: a rule whose algorithm is a queue (leaky-queue) admits a
// request with a Decision.Delay, the time until its place departs, and the
// middleware holds the request until then before the handler runs, less the
// places its overload.Shape lets pass at once (Config.Shapes, nginx's
// delay=N). The longest hold the shape and the request's deadline allow is
// part of the decision (engine.Hit.MaxDelay): a request that would be held
// longer is refused by the store, as by a full queue, and counts in no rule.
// A request whose client leaves during its hold gives back what it counted
// (engine.Verdict.Refunds).

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

// bound sets the MaxDelay of the enforced queue hits of a request with
// context ctx: the longest departure its shape and its deadline allow.
func (pre *prepared) bound(ctx context.Context, hits []engine.Hit) {
	if !pre.queues {
		return
	}
	var left time.Duration
	dl, hasDeadline := ctx.Deadline()
	if hasDeadline {
		left = time.Until(dl)
	}
	for i := range hits {
		h := &hits[i]
		if h.Rule.Algorithm != portero.LeakyQueue || h.Rule.Shadow {
			continue
		}
		sh := pre.shapeOf(h.Rule.Index)
		if bound, ok := sh.Bound(left, hasDeadline); ok {
			// A hold is the departure less Delay places; 1 ns refuses all.
			h.MaxDelay = max(bound+time.Duration(sh.Delay)*h.Rule.Limit.Interval(), 1)
		}
	}
}

// queueDelay returns how long admitted verdict v's request is held: the
// longest hold among its enforced rules (shadow rules hold nothing), each
// its Decision.Delay as its shape reads it.
func queueDelay(v *engine.Verdict, pre *prepared) time.Duration {
	var d time.Duration
	for i := range v.Results {
		res := &v.Results[i]
		if res.Rule.Shadow || res.Decision.Delay == 0 {
			continue
		}
		d = max(d, pre.shapeOf(res.Rule.Index).Hold(res.Decision.Delay, res.Rule.Limit.Interval()))
	}
	return d
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

// refund gives back adj (engine.Verdict.Refunds) for r, whose context may
// be done.
func refund(cfg *Config, r *http.Request, adj []engine.Adjustment) {
	err := cfg.engine.Settle(context.WithoutCancel(r.Context()), cfg.Now(), adj)
	// A store without Adjust keeps what it counted.
	if err != nil && !errors.Is(err, portero.ErrNotAdjustable) && cfg.OnError != nil {
		cfg.OnError(r, err)
	}
}
