// Package client is the polite half of rate limiting: an [http.RoundTripper]
// that reacts to 429 Too Many Requests and 503 Service Unavailable the way the
// server asks it to, instead of insisting or giving up for good.
//
// A [Transport] wraps another RoundTripper and, for every request:
//
//   - asks the per-host circuit breaker (github.com/sony/gobreaker/v2) for
//     permission; an open breaker answers at once with [ErrCircuitOpen] or a
//     caller-supplied fallback. It counts calls, not attempts;
//   - waits for the per-host [Pacer], a client-side token bucket fed by the
//     RateLimit-Policy and RateLimit response fields
//     (draft-ietf-httpapi-ratelimit-headers-11) and by Retry-After, so that
//     all goroutines sharing the Transport stay within the quota the server
//     announced instead of discovering it by hitting it;
//   - retries 429 and 503 responses (and, if asked, connection errors and
//     timeouts) for idempotent requests only, waiting what Retry-After says
//     (plus up to [Config.RetryAfterJitter] after it, so that clients told
//     the same time do not all come back at once) or, without it, a fully
//     jittered exponential backoff: retry n (the first retry is n = 1) waits
//     a draw uniform in [0, min(Cap, Base·2^(n−1))), see [Backoff].
//
// Both forms of Retry-After (RFC 9110 §10.2.3) are honoured, a date measured
// against the response's Date field; see [ParseRetryAfter]. A wait longer
// than [Config.MaxRetryAfter] is never shortened, which would retry early:
// the request ends at once with a [*RetryAfterError], and the host stays
// held for all of it (up to [Config.MaxHold]).
//
// A request is retried only if its method is idempotent or it carries an
// Idempotency-Key header ([Config.AddIdempotencyKey] adds one to POST and
// PATCH), and only if its body can be replayed (GetBody). No wait is started
// that would end after the context's deadline or [Config.MaxElapsed]: the
// last response is returned as it is, so the caller still sees the 429.
//
// The Transport reads time with time.Now and sleeps with timers, so tests
// run it inside testing/synctest bubbles; the pure parts ([Backoff],
// [ParseRetryAfter], [Pacer]) take the time as a parameter.
package client
