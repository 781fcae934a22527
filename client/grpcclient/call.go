package grpcclient

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/portero-rl/portero/client"
)

// start asks the target's breaker for a call; done reports its outcome
// once (a nil breaker allows all).
func (tg *target) start() (done func(client.Outcome), err error) {
	if tg.breaker == nil {
		return func(client.Outcome) {}, nil
	}
	return tg.breaker.Allow()
}

// outcome is the breaker's reading of how a call ended.
func outcome(ctx context.Context, err error) client.Outcome {
	switch {
	case err == nil:
		return client.Succeeded
	case ctx.Err() != nil:
		return client.Excluded // the caller gave up: says nothing about the target
	case failed(status.Code(err)):
		return client.Failed
	}
	return client.Succeeded
}

// budgetEnd is when the waits of a call that started at start must end.
func (c *Client) budgetEnd(ctx context.Context, start time.Time) (time.Time, bool) {
	deadline, ok := ctx.Deadline()
	if c.cfg.MaxElapsed > 0 {
		if end := start.Add(c.cfg.MaxElapsed); !ok || end.Before(deadline) {
			deadline, ok = end, true
		}
	}
	return deadline, ok
}

// Unary is the unary client interceptor: grpc.WithChainUnaryInterceptor(c.Unary).
func (c *Client) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) (err error) {
	key := cc.Target()
	tg := c.target(key)
	done, berr := tg.start()
	if berr != nil {
		return circuitOpen{target: key}
	}
	defer func() { done(outcome(ctx, err)) }()
	deadline, hasDeadline := c.budgetEnd(ctx, time.Now())
	if err := pace(ctx, tg, deadline, hasDeadline); err != nil {
		return err
	}
	idempotent := c.cfg.Idempotent != nil && c.cfg.Idempotent(method)
	for n := 1; ; n++ {
		var hdr, tr metadata.MD
		err = invoker(ctx, method, req, reply, cc, append(opts[:len(opts):len(opts)], grpc.Header(&hdr), grpc.Trailer(&tr))...)
		received := time.Now()
		r := refusal{}
		if err != nil {
			r = readRefusal(err, tr)
		}
		tg.observe(received, hdr, tr, r)
		if err == nil {
			c.budget.Succeeded()
			return nil
		}
		if ctx.Err() != nil || r.never || r.code != codes.ResourceExhausted && r.code != codes.Unavailable {
			return err
		}
		retryBudget := c.budget.Failed()
		switch {
		case !idempotent && !r.has, // it may have been processed
			r.has && r.delay > c.cfg.MaxRetryDelay, // waiting less would retry early
			n >= c.cfg.MaxAttempts, !retryBudget,
			tg.breaker != nil && tg.breaker.State() == client.BreakerOpen:
			return err
		}
		wait := client.FullJitter(client.Backoff(n, c.cfg.Base, c.cfg.Cap), c.uniform())
		if r.has {
			wait = r.delay
			if j := c.cfg.Jitter; j > 0 {
				if hasDeadline {
					j = min(j, deadline.Sub(received)-wait)
				}
				wait += client.FullJitter(max(j, 0), c.uniform())
			}
		}
		if at := received.Add(wait); hasDeadline && !at.Before(deadline) {
			return err // the caller keeps the refusal and its delay
		}
		if serr := sleep(ctx, time.Until(received.Add(wait))); serr != nil {
			return status.FromContextError(serr).Err()
		}
		if perr := pace(ctx, tg, deadline, hasDeadline); perr != nil {
			return perr
		}
	}
}

// Stream is the stream client interceptor: grpc.WithChainStreamInterceptor(c.Stream).
// It does not retry (see the package documentation).
func (c *Client) Stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	key := cc.Target()
	tg := c.target(key)
	done, berr := tg.start()
	if berr != nil {
		return nil, circuitOpen{target: key}
	}
	deadline, hasDeadline := c.budgetEnd(ctx, time.Now())
	if err := pace(ctx, tg, deadline, hasDeadline); err != nil {
		done(client.Excluded)
		return nil, err
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		tg.observe(time.Now(), nil, nil, readRefusal(err, nil))
		done(outcome(ctx, err))
		return nil, err
	}
	s := &stream{ClientStream: cs}
	s.done = func(err error) {
		s.once.Do(func() {
			s.stop()
			hdr, _ := cs.Header()
			tr := cs.Trailer()
			tg.observe(time.Now(), hdr, tr, readRefusal(err, tr))
			done(outcome(ctx, err))
		})
	}
	// A stream the caller abandons ends with its context: the breaker
	// must still hear of it (a half-open breaker waits for its trial).
	s.stop = context.AfterFunc(ctx, func() { s.once.Do(func() { done(client.Excluded) }) })
	return s, nil
}

// stream reports how a stream ended, once: at the first RecvMsg that
// returns an error (io.EOF being a success).
type stream struct {
	grpc.ClientStream
	once sync.Once
	stop func() bool
	done func(error)
}

func (s *stream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case errors.Is(err, io.EOF):
		s.done(nil)
	case err != nil:
		s.done(err)
	}
	return err
}
