package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sony/gobreaker/v2"
)

// callState is one RoundTrip: the caller's request, its host, its time budget
// and what its last attempt got.
type callState struct {
	t        *Transport
	ctx      context.Context
	req      *http.Request // as the caller passed it (or with an Idempotency-Key)
	key      string        // the host, scheme://host[:port]
	hs       *hostState
	deadline time.Time // the context's deadline or the end of MaxElapsed
	bounded  bool      // deadline is set
	// notRetryable says why the request may not be retried, if so.
	notRetryable GiveUpReason

	n                      int // the last attempt's number, from 1
	resp                   *http.Response
	err                    error
	received               time.Time
	sent, failed, excluded bool // of the last attempt, for the breaker
}

// RoundTrip sends req, pacing, breaking and retrying as configured. It
// returns the last response when it stops retrying (so a caller may still
// read a final 429 and its Retry-After), a *RetryAfterError when the server
// asked for a longer wait than MaxRetryAfter, an error wrapping
// ErrCircuitOpen or ErrBudgetExceeded when nothing (more) could be sent, or
// the context's error when the context ends during a wait.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.begin(req)
	defer t.release(c.hs)
	// The breaker first: an open breaker answers at once, without waiting
	// behind the pacer. It counts the call once, by its last attempt.
	if c.hs.breaker != nil {
		done, err := c.hs.breaker.Allow()
		if err != nil {
			closeBody(c.req)
			return t.refuse(c.req, c.key, err)
		}
		defer func() { done(c.outcome()) }()
	}
	if err := c.pace(0); err != nil {
		closeBody(c.req)
		return nil, err
	}
	attempt := c.req
	for c.n = 1; ; c.n++ {
		ra, hasRA := c.send(attempt)
		if !t.retryable(c.ctx, c.resp, c.err) {
			return c.resp, c.err
		}
		if hasRA && ra > t.cfg.MaxRetryAfter {
			// Waiting less than asked would retry early; waiting that long
			// is not this request's to decide. Hand the 429 back at once.
			c.giveUp(GiveUpRetryAfterTooLong)
			_ = c.resp.Body.Close()
			c.resp.Body = http.NoBody
			return nil, &RetryAfterError{Host: c.key, Wait: ra, Until: c.received.Add(min(ra, t.cfg.MaxHold)), Max: t.cfg.MaxRetryAfter, Response: c.resp}
		}
		next, at, stop := c.nextAttempt(ra, hasRA)
		if stop != 0 {
			return c.giveUp(stop)
		}
		if c.resp != nil {
			drain(c.resp.Body, at)
		}
		err := sleep(c.ctx, time.Until(at))
		if err == nil && c.hs.breaker != nil && c.hs.breaker.State() == BreakerOpen {
			// Other calls opened it while this one waited: send nothing.
			closeBody(next)
			c.giveUp(GiveUpBreakerOpen)
			return t.refuse(c.req, c.key, gobreaker.ErrOpenState)
		}
		if err == nil {
			err = c.pace(c.n)
		}
		if err != nil {
			closeBody(next)
			return nil, err
		}
		attempt = next
	}
}

// begin starts the call of req: its budget, its host, and whether it may be
// retried at all.
func (t *Transport) begin(req *http.Request) *callState {
	ctx := req.Context()
	start := time.Now()
	c := &callState{t: t, ctx: ctx, req: req, key: hostKey(req.URL)}
	c.deadline, c.bounded = ctx.Deadline()
	if t.cfg.MaxElapsed > 0 {
		if end := start.Add(t.cfg.MaxElapsed); !c.bounded || end.Before(c.deadline) {
			c.deadline, c.bounded = end, true
		}
	}
	c.hs = t.host(c.key, start)
	if req.Header.Get(idempotencyKeyHeader) == "" && !idempotent(req.Method) {
		if t.cfg.AddIdempotencyKey && (req.Method == http.MethodPost || req.Method == http.MethodPatch) {
			c.req = req.Clone(ctx) // RoundTrip must not modify the caller's request
			c.req.Header.Set(idempotencyKeyHeader, t.cfg.NewIdempotencyKey())
		} else {
			c.notRetryable = GiveUpNotIdempotent
		}
	}
	if c.notRetryable == 0 && req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		c.notRetryable = GiveUpBodyNotReplayable
	}
	return c
}

// outcome is what the call tells its breaker, by its last attempt.
func (c *callState) outcome() Outcome {
	switch {
	case !c.sent || c.excluded:
		return Excluded // nothing went, or the caller gave up: says nothing about the host
	case c.failed:
		return Failed
	}
	return Succeeded
}

// send makes attempt c.n and tells the pacer what its response said. It
// returns the response's Retry-After, if it has a usable one.
func (c *callState) send(attempt *http.Request) (ra time.Duration, hasRA bool) {
	t := c.t
	if h := t.cfg.Hooks.OnAttempt; h != nil {
		h(Attempt{Request: c.req, Host: c.key, N: c.n})
	}
	c.resp, c.err = t.next.RoundTrip(attempt)
	c.received = time.Now()
	c.sent, c.excluded = true, c.err != nil && c.ctx.Err() != nil
	c.failed = !c.excluded && t.cfg.Breaker.IsFailure(c.resp, c.err)
	if c.resp != nil && (c.resp.StatusCode == http.StatusTooManyRequests || c.resp.StatusCode == http.StatusServiceUnavailable) {
		ra, hasRA = RetryAfter(c.resp.Header, c.received)
	}
	if p := c.hs.pacer; p != nil {
		var pols []Policy
		var lims []Limit
		if c.resp != nil {
			pols, lims = parseHeaderFields(c.resp.Header)
		}
		p.Observe(c.received, pols, lims)
		if hasRA {
			p.Block(c.received, ra) // the full wait (up to MaxHold), even one this request will not make
		}
	}
	return ra, hasRA
}

// nextAttempt decides whether the call retries and when: at the
// Retry-After (plus a little jitter after it, so that a herd told the same
// time does not come back together) or after a full-jitter backoff. It
// returns the next attempt and its time, or why the call stops.
func (c *callState) nextAttempt(ra time.Duration, hasRA bool) (next *http.Request, at time.Time, stop GiveUpReason) {
	t := c.t
	switch {
	case c.notRetryable != 0:
		return nil, at, c.notRetryable
	case c.n >= t.cfg.MaxAttempts:
		return nil, at, GiveUpAttempts
	case c.hs.breaker != nil && c.hs.breaker.State() == BreakerOpen:
		return nil, at, GiveUpBreakerOpen
	}
	now := time.Now()
	wait, why := ra, WaitRetryAfter
	var jitter time.Duration
	if hasRA {
		jitter = c.jitterAfter(now, wait)
		wait += jitter
	} else {
		wait, why = FullJitter(Backoff(c.n, t.cfg.Base, t.cfg.Cap), t.uniform()), WaitBackoff
	}
	at = now.Add(wait)
	// The pacer may hold the host longer (another request's Retry-After,
	// an exhausted RateLimit): checked before letting go of the response,
	// waited for for real after the sleep.
	if c.pastBudget(at) || c.hs.pacer != nil && c.pastBudget(at.Add(c.hs.pacer.Delay(at))) {
		return nil, at, GiveUpBudget
	}
	next = c.req.Clone(c.ctx)
	if c.req.GetBody != nil && c.req.Body != nil && c.req.Body != http.NoBody {
		body, err := c.req.GetBody()
		if err != nil {
			return nil, at, GiveUpBodyNotReplayable
		}
		next.Body = body
	}
	t.onWait(Wait{Request: c.req, Host: c.key, Retry: c.n, Duration: wait, Jitter: jitter, Reason: why, Status: c.status(), Err: c.err})
	return next, at, 0
}

// giveUp returns the last attempt's outcome as it is, telling OnGiveUp why.
func (c *callState) giveUp(r GiveUpReason) (*http.Response, error) {
	if h := c.t.cfg.Hooks.OnGiveUp; h != nil {
		h(GiveUp{Request: c.req, Host: c.key, Attempts: c.n, Reason: r, Status: c.status(), Err: c.err})
	}
	return c.resp, c.err
}

// status is the last response's status, 0 when there was none.
func (c *callState) status() int {
	if c.resp == nil {
		return 0
	}
	return c.resp.StatusCode
}

// pastBudget reports whether a wait ending at would end at or after the
// call's deadline.
func (c *callState) pastBudget(at time.Time) bool { return c.bounded && !at.Before(c.deadline) }

// pace waits until the host's pacer lets a request go, before retry
// (0 for the first attempt), or returns an error wrapping
// ErrBudgetExceeded if that would be at or after the deadline, or the
// context's error.
func (c *callState) pace(retry int) error {
	if c.hs.pacer == nil {
		return nil
	}
	for {
		now := time.Now()
		w := c.hs.pacer.Take(now)
		if w == 0 {
			return nil
		}
		if c.pastBudget(now.Add(w)) {
			return fmt.Errorf("client: %s: %w (%v needed)", c.key, ErrBudgetExceeded, w)
		}
		// Held by a Retry-After: every request waiting for its end would
		// otherwise go at the same instant.
		var jitter time.Duration
		if c.hs.pacer.HeldUntil().After(now) {
			jitter = c.jitterAfter(now, w)
		}
		c.t.onWait(Wait{Request: c.req, Host: c.key, Retry: retry, Duration: w + jitter, Jitter: jitter, Reason: WaitPacing, Status: c.status(), Err: c.err})
		if err := sleep(c.ctx, w+jitter); err != nil {
			return err
		}
	}
}

// jitterAfter draws the jitter added after a server-given wait starting at
// now: uniform in [0, RetryAfterJitter), and never so much that a wait which
// fits before the deadline would not.
func (c *callState) jitterAfter(now time.Time, wait time.Duration) time.Duration {
	ceiling := c.t.cfg.RetryAfterJitter
	if c.bounded {
		ceiling = min(ceiling, c.deadline.Sub(now)-wait)
	}
	if ceiling <= 0 {
		return 0
	}
	return FullJitter(ceiling, c.t.uniform())
}

// retryable reports whether an attempt's outcome is worth retrying, ignoring
// the request's own properties.
func (t *Transport) retryable(ctx context.Context, resp *http.Response, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		return t.cfg.RetryNetworkErrors && transient(err)
	}
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
}

func transient(err error) bool {
	var cert *tls.CertificateVerificationError
	if errors.As(err, &cert) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func (t *Transport) refuse(req *http.Request, key string, err error) (*http.Response, error) {
	err = fmt.Errorf("client: %s: %w (%v)", key, ErrCircuitOpen, err)
	if fb := t.cfg.Breaker.Fallback; fb != nil {
		return fb(req, err)
	}
	return nil, err
}
