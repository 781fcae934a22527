package client

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/dunglas/httpsfv"
)

var (
	// ErrCircuitOpen is returned (wrapped, with the host) when a host's
	// circuit breaker refuses a request and no Fallback is configured.
	ErrCircuitOpen = errors.New("circuit breaker open: the host failed repeatedly, not calling it until the cool-down ends")
	// ErrBudgetExceeded is returned (wrapped) when the pacer would make an
	// attempt wait until or past the context's deadline or the end of
	// Config.MaxElapsed; that attempt is not sent. (When this is known before
	// a retry's wait starts, the last response is returned instead.)
	ErrBudgetExceeded = errors.New("wait for the host's quota would exceed the time budget")
)

// RetryAfterError is returned when a 429 or 503 carries a Retry-After longer
// than Config.MaxRetryAfter: the server asked for a wait this client will not
// make, and a shorter one would retry early. It comes at once, whatever the
// request and its attempts left, and every request to the host is held
// until Until. Callers find it with errors.As (http.Client wraps it in a
// *url.Error).
type RetryAfterError struct {
	// Host is the pacer's and breaker's key, scheme://host[:port].
	Host string
	// Wait is what the server asked for, counted from when the response
	// arrived. Until is when the host's hold ends: that instant, or
	// Config.MaxHold after the response when Wait is longer.
	Wait  time.Duration
	Until time.Time
	// Max is Config.MaxRetryAfter.
	Max time.Duration
	// Response is the 429 or 503 with its status and header; its body has
	// been closed and replaced by http.NoBody.
	Response *http.Response
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("client: %s answered %d with Retry-After %v, above MaxRetryAfter %v: not retrying; the host is held until then",
		e.Host, e.Response.StatusCode, e.Wait, e.Max)
}

// Defaults for the zero values of Config.
const (
	DefaultMaxAttempts   = 5
	DefaultBase          = 500 * time.Millisecond
	DefaultCap           = 10 * time.Second
	DefaultMaxElapsed    = 60 * time.Second
	DefaultMaxRetryAfter = 30 * time.Second
	// DefaultRetryAfterJitter is the most added after a Retry-After: as
	// much as the seconds of delay-seconds are coarse, so a herd told
	// "Retry-After: 1" comes back over one second instead of one instant.
	DefaultRetryAfterJitter = time.Second
	DefaultBreakerFailures  = 5
	DefaultBreakerCoolDown  = 30 * time.Second
	maxHosts                = 1024
	drainLimit              = 2 << 10 // as net/http reads of a redirect's body before following it
	idempotencyKeyHeader    = "Idempotency-Key"
)

// Config configures a [Transport]. The zero value is usable: every zero field
// means the documented default.
type Config struct {
	// Transport sends each attempt; nil means http.DefaultTransport.
	Transport http.RoundTripper
	// MaxAttempts is the most attempts per request, the first included;
	// 0 means DefaultMaxAttempts (5), 1 means never retry.
	MaxAttempts int
	// Base and Cap shape the backoff without Retry-After: retry n waits
	// uniformly in [0, min(Cap, Base·2^(n−1))). Zero means 0.5 s and 10 s.
	Base, Cap time.Duration
	// MaxElapsed bounds one request: no wait is started that would end more
	// than MaxElapsed after RoundTrip began (an attempt in flight is not cut:
	// use the context for that). 0 means DefaultMaxElapsed (60 s); negative
	// means only the context bounds it.
	MaxElapsed time.Duration
	// MaxRetryAfter is the longest Retry-After a request waits for before
	// retrying. A longer one is never shortened (that would retry early):
	// RoundTrip returns at once with a *RetryAfterError, and the host stays
	// held for the whole wait. 0 means DefaultMaxRetryAfter (30 s).
	MaxRetryAfter time.Duration
	// RetryNetworkErrors also retries connection errors and timeouts
	// (net.Error, unexpected EOF), never TLS certificate errors or the
	// caller's own cancellation.
	RetryNetworkErrors bool
	// AddIdempotencyKey gives POST and PATCH requests that lack one a fresh
	// Idempotency-Key header (the same for all attempts), which makes them
	// retryable.
	AddIdempotencyKey bool
	// NewIdempotencyKey makes the keys; nil means a random UUIDv4 written as
	// an sf-string, as draft-ietf-httpapi-idempotency-key-header shows it.
	NewIdempotencyKey func() string
	// RetryAfterJitter spreads clients told the same Retry-After: each wait
	// for a Retry-After (its own, or a hold set by another request's) is
	// lengthened by a draw uniform in [0, RetryAfterJitter) — after the
	// server's time, never before it, and never past the time budget.
	// 0 means DefaultRetryAfterJitter (1 s, the resolution of
	// delay-seconds); negative turns it off.
	RetryAfterJitter time.Duration
	// MaxHold is the longest one server can hold back the requests to it:
	// a Retry-After hold, a RateLimit t and a RateLimit-Policy w beyond it
	// are cut to it, so t=999999999 does not stop a host for 31 years. It
	// must not be below MaxRetryAfter. 0 means DefaultMaxHold (24 h).
	MaxHold time.Duration
	// DisablePacing turns off the per-host pacer (RateLimit fields and the
	// host-wide effect of Retry-After).
	DisablePacing bool
	// Breaker configures the per-host circuit breakers.
	Breaker BreakerConfig
	// Rand is the source of jitter; nil means math/rand/v2's global source.
	// Seed it (rand.NewPCG(1, 2)) to make waits reproducible. It is used
	// under a lock, so it need not be safe for concurrent use.
	Rand rand.Source
	// Hooks receive events for logging and metrics.
	Hooks Hooks
}

// BreakerConfig configures the circuit breaker kept for each host.
type BreakerConfig struct {
	// Disabled turns breakers off.
	Disabled bool
	// Failures is how many consecutive failed calls open the breaker;
	// 0 means DefaultBreakerFailures (5). A call counts once, by its last
	// attempt, however many times it was retried: one GET retried five
	// times against a 503 is one failed call.
	Failures int
	// CoolDown is how long an open breaker refuses requests before letting
	// one trial through; 0 means DefaultBreakerCoolDown (30 s).
	CoolDown time.Duration
	// IsFailure classifies an attempt; a call is failed when its last
	// attempt is. It is called after every attempt, before the response's
	// body is read. nil means: a transport error or status 500, 502, 503 or
	// 504. A 429 is not a failure: the host is healthy enough to say "slow
	// down", and pacing and Retry-After deal with it. A call that sent
	// nothing (the pacer's ErrBudgetExceeded) or whose last attempt ended in
	// the caller's own cancellation is not counted at all.
	IsFailure func(resp *http.Response, err error) bool
	// Fallback answers requests that the breaker refuses — at once, before
	// the pacer is asked, and also a request whose next retry finds the
	// breaker opened by other calls; nil means they fail with an error
	// wrapping ErrCircuitOpen.
	Fallback func(req *http.Request, err error) (*http.Response, error)
}

// Transport is an http.RoundTripper that paces, breaks circuits and retries,
// as the package documentation describes. It is safe for concurrent use and
// starts no goroutines (a timer may close a slow body it drains); pacers and
// breakers are per host and shared by all requests through the same
// Transport. Up to 1024 hosts are remembered; to make room, hosts that hold
// nothing back (no call in flight, an idle pacer, a closed breaker with no
// failure counted) are forgotten first.
type Transport struct {
	cfg  Config
	next http.RoundTripper

	randMu sync.Mutex
	rnd    *rand.Rand

	mu    sync.Mutex
	hosts map[string]*hostState
}

type hostState struct {
	pacer   *Pacer
	breaker *Breaker
	calls   int // RoundTrips using it now; under Transport.mu
}

// idle reports whether forgetting hs at now loses nothing: no call in
// flight, a pacer that holds nothing back, a closed breaker with no failure
// counted. The caller holds Transport.mu.
func (hs *hostState) idle(now time.Time) bool {
	if hs.calls > 0 || (hs.pacer != nil && !hs.pacer.idle(now)) {
		return false
	}
	return hs.breaker == nil || hs.breaker.idle()
}

var _ http.RoundTripper = (*Transport)(nil)

// New validates cfg, fills in its defaults and returns a Transport.
func New(cfg Config) (*Transport, error) {
	switch {
	case cfg.MaxAttempts < 0:
		return nil, fmt.Errorf("client: MaxAttempts %d is negative", cfg.MaxAttempts)
	case cfg.Base < 0, cfg.Cap < 0:
		return nil, fmt.Errorf("client: Base %v and Cap %v must not be negative", cfg.Base, cfg.Cap)
	case cfg.MaxRetryAfter < 0, cfg.MaxHold < 0:
		return nil, fmt.Errorf("client: MaxRetryAfter %v and MaxHold %v must not be negative", cfg.MaxRetryAfter, cfg.MaxHold)
	case cfg.Breaker.Failures < 0, cfg.Breaker.CoolDown < 0:
		return nil, fmt.Errorf("client: breaker Failures %d and CoolDown %v must not be negative", cfg.Breaker.Failures, cfg.Breaker.CoolDown)
	}
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.Base = cmp.Or(cfg.Base, DefaultBase)
	cfg.Cap = cmp.Or(cfg.Cap, DefaultCap)
	if cfg.Cap < cfg.Base {
		return nil, fmt.Errorf("client: Cap %v is below Base %v", cfg.Cap, cfg.Base)
	}
	cfg.MaxElapsed = cmp.Or(cfg.MaxElapsed, DefaultMaxElapsed)
	cfg.MaxRetryAfter = cmp.Or(cfg.MaxRetryAfter, DefaultMaxRetryAfter)
	cfg.RetryAfterJitter = max(0, cmp.Or(cfg.RetryAfterJitter, DefaultRetryAfterJitter)) // negative: none
	cfg.MaxHold = cmp.Or(cfg.MaxHold, DefaultMaxHold)
	if cfg.MaxHold < cfg.MaxRetryAfter {
		return nil, fmt.Errorf("client: MaxHold %v is below MaxRetryAfter %v", cfg.MaxHold, cfg.MaxRetryAfter)
	}
	cfg.Breaker.Failures = cmp.Or(cfg.Breaker.Failures, DefaultBreakerFailures)
	cfg.Breaker.CoolDown = cmp.Or(cfg.Breaker.CoolDown, DefaultBreakerCoolDown)
	if cfg.Breaker.IsFailure == nil {
		cfg.Breaker.IsFailure = defaultIsFailure
	}
	if cfg.NewIdempotencyKey == nil {
		cfg.NewIdempotencyKey = newUUIDKey
	}
	t := &Transport{cfg: cfg, next: cfg.Transport, hosts: map[string]*hostState{}}
	if t.next == nil {
		t.next = http.DefaultTransport
	}
	if cfg.Rand != nil {
		t.rnd = rand.New(cfg.Rand)
	}
	return t, nil
}

// NewClient returns an *http.Client whose Transport is New(cfg).
func NewClient(cfg Config) (*http.Client, error) {
	t, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: t}, nil
}

// CloseIdleConnections closes the idle connections of the wrapped transport,
// if it can.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// BreakerState reports the state of the circuit breaker for host
// (scheme://host[:port]); BreakerClosed for unknown hosts or when breakers
// are disabled.
func (t *Transport) BreakerState(host string) BreakerState {
	t.mu.Lock()
	hs := t.hosts[host]
	t.mu.Unlock()
	if hs == nil || hs.breaker == nil {
		return BreakerClosed
	}
	return hs.breaker.State()
}

func (t *Transport) uniform() float64 {
	if t.rnd == nil {
		return rand.Float64()
	}
	t.randMu.Lock()
	defer t.randMu.Unlock()
	return t.rnd.Float64()
}

func hostKey(u *url.URL) string {
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// host returns the state kept for key, counting the caller as one of its
// calls until it calls release. At most maxHosts hosts are remembered: to
// make room, idle ones are forgotten first, and only when none is idle an
// arbitrary one (then only politeness towards that host is lost).
func (t *Transport) host(key string, now time.Time) *hostState {
	t.mu.Lock()
	defer t.mu.Unlock()
	if hs := t.hosts[key]; hs != nil {
		hs.calls++
		return hs
	}
	if len(t.hosts) >= maxHosts {
		for k, hs := range t.hosts {
			if hs.idle(now) {
				delete(t.hosts, k)
			}
		}
	}
	if len(t.hosts) >= maxHosts {
		for k := range t.hosts {
			delete(t.hosts, k)
			break
		}
	}
	hs := &hostState{calls: 1}
	if !t.cfg.DisablePacing {
		hs.pacer = NewPacerMaxHold(t.cfg.MaxHold)
	}
	if !t.cfg.Breaker.Disabled {
		hs.breaker = NewBreaker(key, t.cfg.Breaker.Failures, t.cfg.Breaker.CoolDown, t.cfg.Hooks.OnBreaker)
	}
	t.hosts[key] = hs
	return hs
}

func (t *Transport) release(hs *hostState) {
	t.mu.Lock()
	hs.calls--
	t.mu.Unlock()
}

func defaultIsFailure(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	switch resp.StatusCode {
	case 500, 502, 503, 504:
		return true
	}
	return false
}

func idempotent(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodTrace:
		return true
	}
	return false
}

func (t *Transport) onWait(w Wait) {
	if h := t.cfg.Hooks.OnWait; h != nil {
		h(w)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// drain reads what is left of a body that will not be used, so that its
// connection can be reused, and closes it. It reads at most drainLimit bytes
// and stops at until (when the retry is due, never after the time budget),
// closing the body from a timer if a slow server keeps the read waiting:
// a trickling body must not hold the request.
func drain(body io.ReadCloser, until time.Time) {
	if d := time.Until(until); d > 0 {
		stop := time.AfterFunc(d, func() { _ = body.Close() })
		_, _ = io.CopyN(io.Discard, body, drainLimit)
		stop.Stop()
	}
	_ = body.Close()
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}

func newUUIDKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	// A UUID is printable ASCII: always a valid sf-string.
	key, _ := httpsfv.Marshal(httpsfv.NewItem(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])))
	return key
}
