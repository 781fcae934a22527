// Package grpcclient is package client for gRPC: unary and stream client
// interceptors that honour a server's refusal instead of insisting or giving
// up for good, with the same backoff, jitter, pacer, circuit breaker and
// retry budget as the HTTP Transport (package client's Backoff,
// FullJitter, Pacer, Breaker and RetryBudget: one implementation of each).
//
// For a unary call, per target (the ClientConn's Target):
//
//   - the circuit breaker is asked first; an open breaker answers at once
//     with codes.Unavailable wrapping client.ErrCircuitOpen. It counts
//     calls, not attempts: a call is one success or one failure, by its last
//     attempt (Unavailable, Internal, Unknown, DataLoss are failures;
//     ResourceExhausted is not: the server is healthy enough to say "slow
//     down");
//   - the pacer, fed by the ratelimit-policy and ratelimit metadata and by
//     every refusal's delay, holds the call while the target's quota is
//     spent, so that calls sharing the interceptor stay within it;
//   - ResourceExhausted and Unavailable are retried, waiting the server's
//     delay — google.rpc.RetryInfo, or else the grpc-retry-pushback-ms
//     trailer — plus a small jitter after it (Config.Jitter), or, without a
//     delay, a fully jittered exponential backoff capped at Config.Cap;
//   - only what is safe: a method the caller declares idempotent
//     (Config.Idempotent), or any method when the refusal carries a delay —
//     the server refused before doing anything (Portero's interceptors send
//     a delay only then); a refusal that can never pass (pushback -1, or
//     ResourceExhausted with a QuotaFailure and no delay) is never retried;
//   - within Config.MaxAttempts, the context's deadline and
//     Config.MaxElapsed (no wait starts that would end after them), a delay
//     no longer than Config.MaxRetryDelay, and the retry budget (gRPC's
//     retry throttling, shared by every call of the Client).
//
// A stream is not retried (its messages are the application's to replay),
// but it asks the breaker and the pacer, reports its outcome, and its
// refusal's delay holds the target's next calls.
//
// # Beside grpc-go's retry policy
//
// grpc-go has its own retries, configured in the service config
// (methodConfig.retryPolicy: maxAttempts, initialBackoff, maxBackoff,
// backoffMultiplier, retryableStatusCodes; retryThrottling), which honour
// grpc-retry-pushback-ms exactly — Portero's server interceptors send it —
// and retry only Trailers-Only responses. Use one or the other, not both:
// with both, every attempt of this interceptor is up to maxAttempts of
// grpc-go's (grpc.WithDisableRetry turns grpc-go's off). This interceptor
// adds what the service config cannot say: RetryInfo read when there is no
// pushback, a jitter after the server's time, a pacer from the RateLimit
// fields shared by every call, a circuit breaker, a time budget, and a
// refusal that can never pass told apart.
//
// # Time
//
// It reads time with time.Now and sleeps with timers, so tests run it inside
// testing/synctest bubbles (a grpc-go server and client over bufconn run
// there too).
package grpcclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/portero-rl/portero/client"
)

// Defaults of the zero Config fields.
const (
	DefaultMaxAttempts   = client.DefaultMaxAttempts
	DefaultBase          = client.DefaultBase
	DefaultCap           = client.DefaultCap
	DefaultMaxElapsed    = client.DefaultMaxElapsed
	DefaultMaxRetryDelay = client.DefaultMaxRetryAfter
	// DefaultJitter is the most added after a server's delay: gRPC's delays
	// are exact to the millisecond, so a tenth of a second spreads a herd
	// told the same time without making anyone wait long.
	DefaultJitter = 100 * time.Millisecond
	// PushbackKey is the trailer of a server's retry delay in milliseconds.
	PushbackKey = "grpc-retry-pushback-ms"
	maxTargets  = 1024
)

// Config configures a Client. The zero value is usable: every zero field
// means the documented default.
type Config struct {
	// MaxAttempts is the most attempts per call, the first included; 0
	// means 5, 1 means never retry.
	MaxAttempts int
	// Base and Cap shape the backoff without a server's delay: retry n waits
	// uniformly in [0, min(Cap, Base·2^(n−1))) (client.Backoff). Zero means
	// 0.5 s and 10 s.
	Base, Cap time.Duration
	// MaxElapsed bounds one call: no wait starts that would end more than
	// MaxElapsed after the call began. 0 means 60 s; negative, the context
	// only.
	MaxElapsed time.Duration
	// MaxRetryDelay is the longest server's delay a call waits for; a
	// longer one is not shortened (that would retry early): the refusal is
	// returned at once, and the target is held for the whole delay. 0 means
	// 30 s.
	MaxRetryDelay time.Duration
	// Jitter lengthens each wait for a server's delay by a draw uniform in
	// [0, Jitter), after the server's time and never before it; 0 means
	// DefaultJitter, negative none.
	Jitter time.Duration
	// Idempotent reports whether a method (its full name,
	// "/pkg.Service/Method") may be retried whatever it was answered; nil
	// means none is: only refusals that carry a delay are retried.
	Idempotent func(method string) bool
	// Budget bounds the retries of all the Client's calls together; nil
	// means client.NewRetryBudget(0, 0) (10 tokens, 0.1 per success).
	Budget *client.RetryBudget
	// Breaker configures the circuit breaker of each target.
	Breaker Breaker
	// Rand is the source of jitter; nil means math/rand/v2's global source.
	// It is used under a lock.
	Rand rand.Source
}

// Breaker configures the circuit breaker of each target.
type Breaker struct {
	// Disabled turns breakers off.
	Disabled bool
	// Failures is how many consecutive failed calls open it; 0 means 5.
	Failures int
	// CoolDown is how long an open breaker refuses calls; 0 means 30 s.
	CoolDown time.Duration
	// OnChange, when not nil, is called on every change of state.
	OnChange func(client.BreakerChange)
}

// Client holds the interceptors and what they share: per target a pacer and
// a breaker, and the retry budget. It is safe for concurrent use and starts
// no goroutine. Up to 1024 targets are remembered.
type Client struct {
	cfg    Config
	budget *client.RetryBudget

	randMu sync.Mutex
	rnd    *rand.Rand

	mu      sync.Mutex
	targets map[string]*target
}

type target struct {
	pacer   *client.Pacer
	breaker *client.Breaker // nil when disabled
}

// New validates cfg, fills in its defaults and returns a Client.
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.MaxAttempts < 0, cfg.Base < 0, cfg.Cap < 0, cfg.MaxRetryDelay < 0, cfg.Breaker.Failures < 0, cfg.Breaker.CoolDown < 0:
		return nil, fmt.Errorf("grpcclient: MaxAttempts %d, Base %v, Cap %v, MaxRetryDelay %v, Breaker.Failures %d and Breaker.CoolDown %v must not be negative",
			cfg.MaxAttempts, cfg.Base, cfg.Cap, cfg.MaxRetryDelay, cfg.Breaker.Failures, cfg.Breaker.CoolDown)
	}
	cfg.MaxAttempts = cmpOr(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.Base, cfg.Cap = cmpOr(cfg.Base, DefaultBase), cmpOr(cfg.Cap, DefaultCap)
	if cfg.Cap < cfg.Base {
		return nil, fmt.Errorf("grpcclient: Cap %v is below Base %v", cfg.Cap, cfg.Base)
	}
	cfg.MaxElapsed = cmpOr(cfg.MaxElapsed, DefaultMaxElapsed)
	cfg.MaxRetryDelay = cmpOr(cfg.MaxRetryDelay, DefaultMaxRetryDelay)
	switch {
	case cfg.Jitter == 0:
		cfg.Jitter = DefaultJitter
	case cfg.Jitter < 0:
		cfg.Jitter = 0
	}
	cfg.Breaker.Failures = cmpOr(cfg.Breaker.Failures, client.DefaultBreakerFailures)
	cfg.Breaker.CoolDown = cmpOr(cfg.Breaker.CoolDown, client.DefaultBreakerCoolDown)
	c := &Client{cfg: cfg, budget: cfg.Budget, targets: map[string]*target{}}
	if c.budget == nil {
		c.budget, _ = client.NewRetryBudget(0, 0)
	}
	if cfg.Rand != nil {
		c.rnd = rand.New(cfg.Rand)
	}
	return c, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// DialOptions returns the options that install the interceptors on a
// ClientConn: grpc.NewClient(target, append(opts, c.DialOptions()...)...).
func (c *Client) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(c.Unary), grpc.WithChainStreamInterceptor(c.Stream)}
}

// BreakerState reports the state of the breaker of target; BreakerClosed
// for an unknown target or when breakers are disabled.
func (c *Client) BreakerState(target string) client.BreakerState {
	c.mu.Lock()
	tg := c.targets[target]
	c.mu.Unlock()
	if tg == nil || tg.breaker == nil {
		return client.BreakerClosed
	}
	return tg.breaker.State()
}

func (c *Client) target(key string) *target {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tg := c.targets[key]; tg != nil {
		return tg
	}
	if len(c.targets) >= maxTargets {
		for k := range c.targets {
			delete(c.targets, k) // an arbitrary one: only politeness towards it is lost
			break
		}
	}
	tg := &target{pacer: client.NewPacer()}
	if !c.cfg.Breaker.Disabled {
		tg.breaker = client.NewBreaker(key, c.cfg.Breaker.Failures, c.cfg.Breaker.CoolDown, c.cfg.Breaker.OnChange)
	}
	c.targets[key] = tg
	return tg
}

func (c *Client) uniform() float64 {
	if c.rnd == nil {
		return rand.Float64()
	}
	c.randMu.Lock()
	defer c.randMu.Unlock()
	return c.rnd.Float64()
}

// circuitOpen is the error of a call the breaker refused: codes.Unavailable
// to gRPC, client.ErrCircuitOpen to errors.Is.
type circuitOpen struct{ target string }

func (e circuitOpen) Error() string {
	return fmt.Sprintf("grpcclient: %s: %v", e.target, client.ErrCircuitOpen)
}
func (e circuitOpen) Unwrap() error { return client.ErrCircuitOpen }
func (e circuitOpen) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// refusal is what a failed attempt's status and trailer say about retrying.
type refusal struct {
	code  codes.Code
	delay time.Duration // the server's, when has
	has   bool
	never bool // it can never pass: do not retry
}

// readRefusal reads a failed attempt: RetryInfo first, else the pushback
// trailer; a pushback that is negative or not a number, or a quota failure
// without any delay, says it can never pass.
func readRefusal(err error, trailer metadata.MD) refusal {
	st := status.Convert(err)
	r := refusal{code: st.Code()}
	quota := false
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			if dd := d.GetRetryDelay(); dd != nil && dd.IsValid() && dd.AsDuration() >= 0 {
				r.delay, r.has = dd.AsDuration(), true
			}
		case *errdetails.QuotaFailure:
			quota = true
		}
	}
	if pb := trailer.Get(PushbackKey); len(pb) == 1 && !r.has {
		ms, perr := strconv.ParseInt(pb[0], 10, 64)
		switch {
		case perr != nil || ms < 0:
			r.never = true
		default:
			r.delay, r.has = time.Duration(ms)*time.Millisecond, true
		}
	}
	if r.code == codes.ResourceExhausted && quota && !r.has {
		r.never = true
	}
	return r
}

// failed reports whether a call that ended with code counts against its
// target's breaker.
func failed(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DataLoss:
		return true
	}
	return false
}

// observe feeds the target's pacer with an answer's RateLimit metadata and
// a refusal's delay.
func (tg *target) observe(now time.Time, hdr, trailer metadata.MD, r refusal) {
	md := metadata.Join(hdr, trailer)
	pols, _ := client.ParsePolicies(md.Get("ratelimit-policy"))
	lims, _ := client.ParseLimits(md.Get("ratelimit"))
	tg.pacer.Observe(now, pols, lims)
	if r.has {
		tg.pacer.Block(now, r.delay)
	}
}

var errBudget = errors.New("grpcclient: the wait for the target's quota would exceed the time budget")

// pace waits until the target's pacer lets a call go, or fails when that
// would be at or after the deadline.
func pace(ctx context.Context, tg *target, deadline time.Time, hasDeadline bool) error {
	for {
		now := time.Now()
		w := tg.pacer.Take(now)
		if w == 0 {
			return nil
		}
		if hasDeadline && !now.Add(w).Before(deadline) {
			return status.Error(codes.ResourceExhausted, fmt.Sprintf("%v (%v needed)", errBudget, w))
		}
		if err := sleep(ctx, w); err != nil {
			return status.FromContextError(err).Err()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
