package h2grpc

import (
	"context"
	"sync"
	"time"
)

// callCtx is a call's context: the connection's, with the call's
// grpc-timeout as its deadline, cancelled when the client resets the
// stream or the handler returns. It is a plain value inside the stream and
// makes the standard context (and its timer) only when somebody asks for
// Done or a Value: a handler that never waits, such as one over the memory
// store, costs no context.WithDeadline and no timer.
type callCtx struct {
	parent      context.Context // the connection's
	deadline    time.Time
	hasDeadline bool

	mu       sync.Mutex
	inner    context.Context // the standard context, once made
	stop     context.CancelFunc
	canceled bool
	err      error // the first non-nil Err, which Err then keeps returning
}

func (c *callCtx) init(parent context.Context, timeout time.Duration, hasTimeout bool) {
	c.parent, c.hasDeadline = parent, hasTimeout
	if hasTimeout {
		c.deadline = time.Now().Add(timeout)
	}
}

// std returns the standard context, making it on first use.
func (c *callCtx) std() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		if c.hasDeadline && !c.canceled {
			c.inner, c.stop = context.WithDeadline(c.parent, c.deadline)
		} else {
			c.inner, c.stop = context.WithCancel(c.parent)
		}
		if c.canceled {
			c.stop()
		}
	}
	return c.inner
}

// cancel ends the context: the stream was reset, or its handler returned.
// Past the deadline the context stays DeadlineExceeded, as a standard one
// whose timer has fired would.
func (c *callCtx) cancel() {
	c.mu.Lock()
	if c.err == nil && c.inner == nil {
		c.err = c.errLocked()
		if c.err == nil {
			c.err = context.Canceled
		}
	}
	c.canceled = true
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, c.hasDeadline }

func (c *callCtx) Done() <-chan struct{} { return c.std().Done() }

func (c *callCtx) Value(key any) any { return c.std().Value(key) }

func (c *callCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = c.errLocked()
	}
	return c.err
}

// errLocked is the context's state now; c.mu held.
func (c *callCtx) errLocked() error {
	switch {
	case c.inner != nil:
		return c.inner.Err()
	case c.canceled:
		return context.Canceled
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if c.hasDeadline && !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}
