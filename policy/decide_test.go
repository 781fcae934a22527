package policy_test

import (
	"context"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/policy"
)

// evaluate is what every door does with a policy: compile the request into
// hits, and have the engine decide them over store (whose failures are
// errors here, FailError).
func evaluate(p *policy.Policy, ctx context.Context, store portero.Store, now time.Time, req *policy.Request) (*engine.Verdict, error) {
	v := new(engine.Verdict)
	if err := evaluateInto(p, ctx, store, now, req, v); err != nil {
		return nil, err
	}
	return v, nil
}

func evaluateInto(p *policy.Policy, ctx context.Context, store portero.Store, now time.Time, req *policy.Request, v *engine.Verdict) error {
	hits, _, err := p.Compile(req, nil, nil)
	if err != nil {
		return err
	}
	e, err := engine.New(engine.Options{Store: store, OnError: portero.FailError})
	if err != nil {
		return err
	}
	return e.Decide(ctx, now, hits, v)
}
