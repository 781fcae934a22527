// Package client is the polite half of rate limiting: an [http.RoundTripper]
// that reacts to 429 Too Many Requests and 503 Service Unavailable the way the
// server asks it to, instead of insisting or giving up for good.
//
// A [Transport] wraps another RoundTripper and, for every request:
//
//   - asks the per-host circuit breaker (github.com/sony/gobreaker/v2) for
//     permission; an open breaker answers at once with [ErrCircuitOpen] or a
//     caller-supplied fallback. It counts calls, not attempts: a call is one
//     failure or one success, by its last attempt;
//   - waits for the per-host pacer, a client-side token bucket fed by the
//     draft-11 RateLimit-Policy and RateLimit response fields and by
//     Retry-After, so that all goroutines sharing the Transport stay within
//     the quota the server announced instead of discovering it by hitting it;
//   - retries 429 and 503 responses (and, if asked, connection errors and
//     timeouts) for idempotent requests only, waiting what Retry-After says or,
//     without it, a fully jittered exponential backoff.
//
// # Retry numbering and the backoff formula
//
// Attempts are numbered from 1; retry n is attempt n+1, so the first retry is
// n = 1. Without a usable Retry-After, retry n waits a duration drawn
// uniformly from [0, min(Cap, Base·2^(n−1))) ("full jitter"); see [Backoff].
// With the defaults (Base 0.5 s, Cap 10 s) the ceilings are 0.5 s, 1 s, 2 s,
// 4 s, 8 s, 10 s, 10 s, …
//
// # Retry-After
//
// Both forms of RFC 9110 §10.2.3 are honoured: delay-seconds, and an HTTP-date
// in any of its three formats, measured against the response's Date field when
// it has one (so clock skew between client and server does not matter).
// Malformed values are ignored. A wait longer than [Config.MaxRetryAfter] is
// not shortened, which would retry early: the request ends at once with a
// [*RetryAfterError] carrying the response and the wait, and the host stays
// held for all of it (up to [Config.MaxHold], 24 h). Each wait for a
// Retry-After is lengthened by a small random jitter, up to
// [Config.RetryAfterJitter] (1 s), after the server's time and never before
// it, so that clients told the same time do not all come back at once. See
// [ParseRetryAfter].
//
// # What is never retried
//
// A request is retried only if its method is idempotent (GET, HEAD, OPTIONS,
// PUT, DELETE, plus TRACE) or it carries an Idempotency-Key header
// ([Config.AddIdempotencyKey] adds one to POST and PATCH). A request whose
// body cannot be replayed (Body set but GetBody nil) is sent once. No wait is
// started that would end after the context's deadline or after
// [Config.MaxElapsed]; the last response is then returned as it is, so the
// caller still sees the 429 and its Retry-After. Cancelling the context stops
// a wait at once.
//
// # Time
//
// The Transport reads time with time.Now and sleeps with timers, so tests
// run it inside testing/synctest bubbles; the pure parts ([Backoff],
// [ParseRetryAfter], [Pacer]) take the time as a parameter.
package client
