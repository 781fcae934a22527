package client

import (
	"net/http"
	"time"
)

// Hooks are optional callbacks for logging and metrics. Each nil field does
// nothing. They are called synchronously on the goroutine doing the request
// (OnBreaker: on whichever goroutine made the breaker change state, while the
// breaker is locked), so they must be fast and must not call the Transport.
type Hooks struct {
	// OnAttempt is called just before each attempt is sent.
	OnAttempt func(Attempt)
	// OnWait is called before each wait, with the duration chosen and why.
	OnWait func(Wait)
	// OnGiveUp is called when a response or error that could have been
	// retried is returned as it is, with the reason.
	OnGiveUp func(GiveUp)
	// OnBreaker is called when a host's circuit breaker changes state.
	OnBreaker func(BreakerChange)
}

// Attempt describes one attempt about to be sent.
type Attempt struct {
	Request *http.Request // the request as the caller passed it
	Host    string        // scheme://host[:port], the key of pacer and breaker
	N       int           // attempt number, from 1; retry n is attempt n+1
}

// WaitReason says why the Transport waits.
type WaitReason int

// The reasons for a wait.
const (
	// WaitRetryAfter: the response's Retry-After, honoured as given.
	WaitRetryAfter WaitReason = iota + 1
	// WaitBackoff: no usable Retry-After; full-jitter exponential backoff.
	WaitBackoff
	// WaitPacing: the host's pacer (RateLimit fields, or a Retry-After
	// received by another request) holds the request back.
	WaitPacing
)

// String returns the reason as used in logs, such as "retry-after".
func (r WaitReason) String() string {
	return name(int(r), "", "retry-after", "backoff", "pacing")
}

// name returns names[i], or "unknown" when there is none.
func name(i int, names ...string) string {
	if i < 0 || i >= len(names) || names[i] == "" {
		return "unknown"
	}
	return names[i]
}

// Wait describes a wait about to start.
type Wait struct {
	Request  *http.Request
	Host     string
	Retry    int // the retry n this wait precedes (from 1); 0 before the first attempt
	Duration time.Duration
	// Jitter is the part of Duration added after the server's time
	// (Config.RetryAfterJitter); 0 for backoff, which is jittered whole.
	Jitter time.Duration
	Reason WaitReason
	Status int   // status of the response that caused the wait, 0 if none
	Err    error // transport error that caused the wait, if any
}

// GiveUpReason says why a retryable outcome was not retried.
type GiveUpReason int

// The reasons for giving up.
const (
	// GiveUpAttempts: Config.MaxAttempts attempts were made.
	GiveUpAttempts GiveUpReason = iota + 1
	// GiveUpBudget: the next wait would end after the context's deadline or
	// after Config.MaxElapsed.
	GiveUpBudget
	// GiveUpNotIdempotent: the method is not idempotent and the request has
	// no Idempotency-Key.
	GiveUpNotIdempotent
	// GiveUpBodyNotReplayable: the request has a body but no GetBody, or
	// GetBody failed.
	GiveUpBodyNotReplayable
	// GiveUpBreakerOpen: the host's circuit breaker opened.
	GiveUpBreakerOpen
	// GiveUpRetryAfterTooLong: the response's Retry-After asked for more
	// than Config.MaxRetryAfter; RoundTrip returns a *RetryAfterError.
	GiveUpRetryAfterTooLong
)

// String returns the reason as used in logs, such as "max-attempts".
func (r GiveUpReason) String() string {
	return name(int(r), "", "max-attempts", "time-budget", "not-idempotent", "body-not-replayable", "breaker-open", "retry-after-too-long")
}

// GiveUp describes a retryable outcome returned without retrying.
type GiveUp struct {
	Request  *http.Request
	Host     string
	Attempts int // attempts made
	Reason   GiveUpReason
	Status   int   // status of the last response, 0 if none
	Err      error // error of the last attempt, if any
}

// BreakerState is the state of a host's circuit breaker.
type BreakerState int

// The breaker states.
const (
	// BreakerClosed: requests flow; failures are counted.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: the cool-down is over; one trial request may go.
	BreakerHalfOpen
	// BreakerOpen: requests fail at once with ErrCircuitOpen (or the
	// fallback) until the cool-down ends.
	BreakerOpen
)

// String returns the state as used in logs: "closed", "half-open" or "open".
func (s BreakerState) String() string { return name(int(s), "closed", "half-open", "open") }

// BreakerChange describes a breaker state change.
type BreakerChange struct {
	Host     string
	From, To BreakerState
}
