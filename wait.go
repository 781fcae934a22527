package portero

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// WaitN blocks until l admits a request of the given cost from key, and
// returns the decision that admitted it: backpressure for a producer (a
// batch job, a queue consumer, a copy loop) that must slow down rather than
// drop. It asks l at clock() (time.Now when nil), sleeps a refusal's
// RetryAfter and asks again; an admission with a Delay (a leaky queue)
// sleeps until the request departs.
//
// It returns at once an error wrapping context.DeadlineExceeded when the
// next wake-up would come after ctx's deadline, ctx's error when ctx ends
// during a sleep, and l's error as soon as l returns one. When l has a
// method Done() <-chan struct{} (memstore's Limiter), its closing ends a
// sleep with an error wrapping ErrClosed.
//
// Waiters are not queued: under contention a newcomer may pass before a
// waiter. A leaky queue is the fair alternative, each admission reserving
// its place; a place whose wait ctx cancels stays taken here, where
// memstore's Limiter.WaitN gives it back.
func WaitN(ctx context.Context, l Limiter, key string, cost int64, clock func() time.Time) (Decision, error) {
	if clock == nil {
		clock = time.Now
	}
	var done <-chan struct{}
	if d, ok := l.(interface{ Done() <-chan struct{} }); ok {
		done = d.Done()
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		d, err := l.AllowN(ctx, key, clock(), cost)
		if err != nil {
			return d, err
		}
		wait := d.RetryAfter
		if d.Allowed {
			wait = d.Delay
			if wait <= 0 {
				return d, nil
			}
		} else if wait <= 0 {
			return d, fmt.Errorf("portero: key %q: refused without a time to wait: %w", key, errors.ErrUnsupported)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			what := "admission"
			if d.Allowed {
				what = "departure"
			}
			return d, fmt.Errorf("portero: key %q: %s in %v is after the deadline: %w", key, what, wait, context.DeadlineExceeded)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return d, ctx.Err()
		case <-done:
			return d, fmt.Errorf("portero: waiting: %w", ErrClosed)
		}
		if d.Allowed {
			return d, nil // departed
		}
	}
}
