package grpclimit

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/policy"
)

// messages holds Config.Messages: rules that count each message a client
// streams.
type messages struct {
	policy *policy.Policy
	engine *engine.Engine
}

func newMessages(p *policy.Policy, e *engine.Engine) (*messages, error) {
	for _, r := range p.Rules() {
		switch {
		case r.IsConcurrency():
			return nil, fmt.Errorf("grpclimit: Messages: rule %q is a concurrency limit: a message is not in flight; limit the stream with a rule of Policy", r.Name)
		case r.AfterResponse():
			return nil, fmt.Errorf("grpclimit: Messages: rule %q is settled after a response: a message has none", r.Name)
		}
	}
	return &messages{policy: p, engine: e}, nil
}

// gate compiles the message rules for one stream, whose call is req, with
// a StreamIdentity of its own. The hits are the same for every message of
// the stream, so they are compiled once.
func (m *messages) gate(ctx context.Context, req *policy.Request) (*messageGate, error) {
	var id [8]byte
	for i := range id {
		id[i] = byte(rand.Uint32())
	}
	r := *req
	r.Identity = make(map[string]string, len(req.Identity)+1)
	for k, v := range req.Identity {
		r.Identity[k] = v
	}
	r.Identity[StreamIdentity] = hex.EncodeToString(id[:]) // random: streams of other instances share the store
	hits, _, err := m.policy.Compile(&r, nil, nil)
	if err != nil {
		return nil, err
	}
	return &messageGate{engine: m.engine, hits: hits}, nil
}

// messageGate decides the messages of one stream. Its AllowN makes it a
// portero.Limiter, so that portero.WaitN, the one way of waiting for a
// refusal's retry time, does the waiting. A stream's RecvMsg is called by
// one goroutine at a time (grpc-go's rule), so it needs no lock.
type messageGate struct {
	engine *engine.Engine
	hits   []engine.Hit
	v      engine.Verdict
}

var _ portero.Limiter = (*messageGate)(nil)

// AllowN decides one message at now; key and cost are the gate's own.
func (g *messageGate) AllowN(ctx context.Context, _ string, now time.Time, _ int64) (portero.Decision, error) {
	if err := g.engine.Decide(ctx, now, g.hits, &g.v); err != nil {
		return portero.Decision{}, err
	}
	return portero.Decision{Allowed: g.v.Allowed, RetryAfter: RetryDelay(&g.v)}, nil
}

// wait returns once a message is admitted, or the refusal's status when
// waiting cannot help (it can never pass, or the deadline would pass
// first), or the context's.
func (g *messageGate) wait(ctx context.Context, now func() time.Time) error {
	if len(g.hits) == 0 {
		return nil
	}
	_, err := portero.WaitN(ctx, g, "", 1, now)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case !g.v.Allowed && len(g.v.Violated) > 0:
		return Refusal(&g.v).Err() // the deadline comes first, or it can never pass
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, "rate limiter: "+err.Error())
}
