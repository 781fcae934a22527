package descriptor

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/quote"
)

// Descriptor is one request descriptor, as Envoy sends it.
type Descriptor struct {
	// Entries are the ordered (key, value) pairs; at least one.
	Entries []Entry
	// Override, when set, replaces the configured limit.
	Override *Override
	// Hits is the descriptor's own hits_addend: nil when unset (the
	// request's applies), 0 to check without counting.
	Hits *uint64
	// Negative is is_negative_hits, a refund: an error, except under
	// Options.Envoyproxy, where it is ignored as envoyproxy/ratelimit
	// ignores it (the hits are counted).
	Negative bool
}

// Request is one ShouldRateLimit call without the protobuf types.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Hits is the request's hits_addend; 0 means 1.
	Hits uint32
}

// ErrorKind classifies request errors for the doors: gRPC codes and HTTP
// statuses.
type ErrorKind int

// The request error kinds.
const (
	// InvalidArgument is malformed input: gRPC INVALID_ARGUMENT, HTTP 400.
	InvalidArgument ErrorKind = iota + 1
	// NotFound is an unknown domain: gRPC NOT_FOUND, HTTP 404.
	NotFound
)

// RequestError reports a request that cannot be compiled: bad input
// (InvalidArgument) or an unknown domain (NotFound).
type RequestError struct {
	Kind ErrorKind
	Msg  string
}

func (e *RequestError) Error() string { return e.Msg }

func badRequest(format string, args ...any) error {
	return &RequestError{Kind: InvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

// Options bound and tune a Compiler. The zero value of each field means
// its default.
type Options struct {
	// AllowUnknownDomains compiles a request for a domain that is not
	// configured into no hits (so it is allowed), as envoyproxy/ratelimit
	// does. By default such a request is an error (NotFound), so that a
	// typo is seen.
	AllowUnknownDomains bool
	// MaxDescriptors and MaxEntries bound one request (default 64 and 32),
	// MaxValueLen one key or value in bytes (default 1024).
	MaxDescriptors, MaxEntries, MaxValueLen int
	// MaxOverrides caps the limit overrides in use in one domain: distinct
	// (descriptor keys, requests_per_unit, unit), each a rule the store
	// keeps state under; DefaultMaxOverrides when zero. Descriptor values
	// do not count: they are keys of the override's rule, bounded by the
	// store's max_keys and expiring with its window. When a domain has
	// MaxOverrides in use, a new one takes the place of the least recently
	// used if that one is idle (see OverrideIdle); otherwise the request is
	// refused as invalid, saying so, rather than growing memory (under
	// Envoyproxy it is compiled afresh for that request instead, and kept
	// by no one). Other domains are not affected.
	MaxOverrides int
	// OverrideIdle is how long an override must go unused before a new one
	// may take its place, and never less than its unit: by then the
	// counters of its last window have expired, so the store holds nothing
	// under it and forgetting it changes no decision. DefaultOverrideIdle
	// when zero.
	OverrideIdle time.Duration
	// Envoyproxy compiles as envoyproxy/ratelimit: descriptors are matched
	// on composite strings (Domain.MatchEnvoyproxy), store keys are its
	// cache keys (EnvoyproxyKey with KeyPrefix, for the engine's
	// CountEach counters), an unknown domain compiles into no hits, and
	// requests are bounded only by what it bounds: their size (the gRPC
	// server's message cap), a domain and at least one descriptor. A
	// descriptor without entries, or with an empty key, matches nothing;
	// a descriptor hits_addend may be up to 2^63-1.
	Envoyproxy bool
	// KeyPrefix starts every store key under Envoyproxy
	// (envoyproxy/ratelimit's CACHE_KEY_PREFIX).
	KeyPrefix string
	// QuotaMode is envoyproxy/ratelimit's QUOTA_MODE, with a configuration
	// whose every limit is in quota_mode: every descriptor but the
	// unlimited ones is a quota descriptor, and one without a limit (none
	// matched, or another replaced it) is a quota that passes (Plan.Code).
	QuotaMode bool
}

// DefaultMaxOverrides and DefaultOverrideIdle are the defaults of
// Options.MaxOverrides and Options.OverrideIdle: far more distinct override
// limits than an Envoy route configuration gives one domain, at most a few
// megabytes of store rules per domain, and a domain flooded with overrides
// that stop being used takes new ones again after ten minutes (or the
// flood's unit, when longer).
const (
	DefaultMaxOverrides = 1024
	DefaultOverrideIdle = 10 * time.Minute
)

// Compiler compiles requests against a configuration that can be swapped
// at any time (SetLimits). It is safe for concurrent use.
type Compiler struct {
	opts   Options
	limits atomic.Pointer[Config]

	overrides sync.Map // domain name → *overrideTable
}

// overrideKey identifies the rule of a limit override in its domain: its
// values are store keys under it, not part of it.
type overrideKey struct {
	keys string
	rpu  uint32
	unit Unit
}

// overrideTable holds the overrides in use in one domain, at most
// Options.MaxOverrides, each with the instant of its last use.
type overrideTable struct {
	mu    sync.RWMutex
	byKey map[overrideKey]*overrideEntry
	// fullUntil, while the table is full of overrides none of which is
	// idle, is the earliest instant (Unix ns) at which one may be: until
	// then a new override is refused without looking.
	fullUntil int64
}

type overrideEntry struct {
	limit *Limit
	used  atomic.Int64 // Unix ns of the latest request that named it
	idle  int64        // ns unused before it may be forgotten
}

// touch records a use at now, writing the shared word only when it moved
// by a second or more (every core writing one word would cost more than
// the decision).
func (e *overrideEntry) touch(now int64) {
	if now-e.used.Load() >= int64(time.Second) {
		e.used.Store(now)
	}
}

// NewCompiler returns a compiler of requests against c (nil for no domains
// yet).
func NewCompiler(c *Config, o Options) *Compiler {
	if o.MaxDescriptors <= 0 {
		o.MaxDescriptors = 64
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 32
	}
	if o.MaxValueLen <= 0 {
		o.MaxValueLen = 1024
	}
	if o.MaxOverrides <= 0 {
		o.MaxOverrides = DefaultMaxOverrides
	}
	if o.OverrideIdle <= 0 {
		o.OverrideIdle = DefaultOverrideIdle
	}
	cp := &Compiler{opts: o}
	cp.limits.Store(c)
	return cp
}

// SetLimits replaces the configuration; requests being compiled finish
// with the old one. Counters of rules that did not change are kept (a rule
// is its name, algorithm and limit), and so are the overrides of the
// domains still configured.
func (c *Compiler) SetLimits(cfg *Config) {
	c.limits.Store(cfg)
	c.overrides.Range(func(name, _ any) bool {
		if cfg.Domain(name.(string)) == nil {
			c.overrides.Delete(name)
		}
		return true
	})
}

// Limits returns the current configuration.
func (c *Compiler) Limits() *Config { return c.limits.Load() }

// Plan is a compiled request: the hits for the engine and, per request
// descriptor, what became of it. A door owns a Plan and reuses it (Reset
// keeps its memory).
type Plan struct {
	// Hits are the engine's input, in descriptor order.
	Hits []engine.Hit
	// Descriptors has one entry per request descriptor.
	Descriptors []Planned
	// Of gives, per hit, the index of its descriptor.
	Of []int
	// quotaPasses reports, under Options.QuotaMode, a descriptor without a
	// limit: a quota that passes.
	quotaPasses bool
}

// Planned is what became of one request descriptor.
type Planned struct {
	// Limit is the limit that applies; nil when none does (no match, or a
	// limit replaced by another).
	Limit *Limit
	// Hit is the descriptor's index in Plan.Hits; -1 when it has none (no
	// limit, an unlimited one, or one replaced by another).
	Hit int
}

// Reset empties p for reuse, keeping its memory.
func (p *Plan) Reset() {
	clear(p.Hits)
	clear(p.Descriptors)
	p.Hits, p.Descriptors, p.Of, p.quotaPasses = p.Hits[:0], p.Descriptors[:0], p.Of[:0], false
}

// Compile resets p and fills it from req, for a decision at now (the
// instant that ages the overrides). Errors are *RequestError.
func (c *Compiler) Compile(req *Request, now time.Time, p *Plan) error {
	p.Reset()
	if err := c.validate(req); err != nil {
		return err
	}
	cfg := c.limits.Load()
	dom := cfg.Domain(req.Domain)
	if dom == nil && !c.opts.AllowUnknownDomains && !c.opts.Envoyproxy {
		return &RequestError{Kind: NotFound, Msg: fmt.Sprintf("unknown domain %s (configured: %s)", quote.Input(req.Domain), strings.Join(cfg.Domains(), ", "))}
	}
	reqHits := int64(req.Hits)
	if reqHits == 0 {
		reqHits = 1
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		var lim *Limit
		var m Match
		if dom != nil && d.Override != nil {
			// In an unknown domain (AllowUnknownDomains) an override is
			// ignored, as envoyproxy/ratelimit ignores it: no rule is made.
			var err error
			if lim, err = c.override(req.Domain, d, now.UnixNano()); err != nil {
				return badRequest("descriptor %d: %v", i, err)
			}
		} else if dom != nil && c.opts.Envoyproxy {
			m = dom.MatchEnvoyproxy(d.Entries)
			lim = m.Limit
		} else if dom != nil {
			m = dom.Match(d.Entries)
			lim = m.Limit
		}
		p.Descriptors = append(p.Descriptors, Planned{Limit: lim, Hit: -1})
		if lim == nil || lim.Unlimited {
			continue
		}
		h := engine.Hit{Rule: lim.Rule, Cost: reqHits}
		if c.opts.Envoyproxy {
			h.Key = EnvoyproxyKey(c.opts.KeyPrefix, req.Domain, d.Entries, m)
		} else {
			h.Key = StoreKey(req.Domain, d.Entries, m)
		}
		if d.Hits != nil {
			h.Cost = int64(*d.Hits) // validated: ≤ MaxUint32, or ≤ MaxInt64 under Envoyproxy
			h.CheckOnly = h.Cost == 0
		}
		p.Descriptors[i].Hit = len(p.Hits)
		p.Hits = append(p.Hits, h)
		p.Of = append(p.Of, i)
	}
	p.replace()
	if c.opts.QuotaMode {
		for _, pd := range p.Descriptors {
			p.quotaPasses = p.quotaPasses || pd.Hit < 0 && (pd.Limit == nil || !pd.Limit.Unlimited)
		}
	}
	return nil
}

// replace drops the hits of the limits that another matched limit replaces
// (rate_limit.replaces), as envoyproxy/ratelimit does: a limit is dropped
// when any matched limit (dropped or not) names it.
func (p *Plan) replace() {
	has := false
	for _, pd := range p.Descriptors {
		if pd.Limit != nil && len(pd.Limit.Replaces) > 0 {
			has = true
			break
		}
	}
	if !has {
		return
	}
	replaced := func(name string) bool {
		if name == "" {
			return false
		}
		for _, by := range p.Descriptors {
			if by.Limit != nil && slices.Contains(by.Limit.Replaces, name) {
				return true
			}
		}
		return false
	}
	hits, of := p.Hits[:0], p.Of[:0]
	for i := range p.Descriptors {
		pd := &p.Descriptors[i]
		if pd.Hit < 0 {
			continue
		}
		h := p.Hits[pd.Hit]
		if replaced(pd.Limit.Name) {
			pd.Limit, pd.Hit = nil, -1
			continue
		}
		pd.Hit = len(hits)
		hits, of = append(hits, h), append(of, i)
	}
	clear(p.Hits[len(hits):])
	p.Hits, p.Of = hits, of
}

// override returns the limit of d's override in domain, one per distinct
// overrideKey, made once and kept while it is used (a store keeps state
// under it), at most MaxOverrides per domain.
func (c *Compiler) override(domain string, d *Descriptor, now int64) (*Limit, error) {
	k := overrideKey{keys: Keys(d.Entries), rpu: d.Override.RequestsPerUnit, unit: d.Override.Unit}
	v, ok := c.overrides.Load(domain)
	if !ok {
		v, _ = c.overrides.LoadOrStore(domain, &overrideTable{byKey: map[overrideKey]*overrideEntry{}})
	}
	t := v.(*overrideTable)
	t.mu.RLock()
	e := t.byKey[k]
	t.mu.RUnlock()
	if e != nil {
		e.touch(now)
		return e.limit, nil
	}
	l, err := OverrideLimit(domain, d.Entries, *d.Override)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.byKey[k]; e != nil {
		e.touch(now)
		return e.limit, nil
	}
	if len(t.byKey) >= c.opts.MaxOverrides && !t.forgetIdle(now) {
		if c.opts.Envoyproxy {
			// envoyproxy/ratelimit answers any override: this one is
			// compiled for this request alone. Its counters are keys of
			// the engine's counter rules, which no override adds to.
			return l, nil
		}
		return nil, fmt.Errorf("limit override %d/%s: domain %q has %d limit overrides in use (distinct keys, requests_per_unit and unit, each a rule the store keeps), the most it takes; one may be replaced in %v, once unused for %v or its unit",
			k.rpu, k.unit, domain, len(t.byKey), time.Duration(t.fullUntil-now).Round(time.Second), c.opts.OverrideIdle)
	}
	e = &overrideEntry{limit: l, idle: int64(max(c.opts.OverrideIdle, k.unit.Duration()))}
	e.used.Store(now)
	t.byKey[k] = e
	return l, nil
}

// forgetIdle drops the least recently used override if it has been idle
// long enough, and reports whether it did. When none is, it records when
// the first may be, so that the refusals until then look at nothing. t is
// locked.
func (t *overrideTable) forgetIdle(now int64) bool {
	if now < t.fullUntil {
		return false
	}
	var lru overrideKey
	free := int64(math.MaxInt64) // the earliest instant at which an override is idle
	for k, e := range t.byKey {
		if at := e.used.Load() + e.idle; at < free {
			lru, free = k, at
		}
	}
	if now < free {
		t.fullUntil = free
		return false
	}
	delete(t.byKey, lru)
	return true
}

func (c *Compiler) validate(req *Request) error {
	if req == nil {
		return badRequest("empty request")
	}
	if req.Domain == "" {
		return badRequest("domain is required")
	}
	if len(req.Descriptors) == 0 {
		return badRequest("at least one descriptor is required")
	}
	if c.opts.Envoyproxy {
		return c.validateEnvoyproxy(req)
	}
	if len(req.Domain) > c.opts.MaxValueLen {
		return badRequest("domain longer than %d bytes", c.opts.MaxValueLen)
	}
	if len(req.Descriptors) > c.opts.MaxDescriptors {
		return badRequest("%d descriptors: at most %d per request", len(req.Descriptors), c.opts.MaxDescriptors)
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if d.Negative {
			return badRequest("descriptor %d: is_negative_hits (refunds) is not supported by Portero", i)
		}
		if len(d.Entries) == 0 {
			return badRequest("descriptor %d: at least one entry is required", i)
		}
		if len(d.Entries) > c.opts.MaxEntries {
			return badRequest("descriptor %d: %d entries: at most %d", i, len(d.Entries), c.opts.MaxEntries)
		}
		for j, en := range d.Entries {
			if en.Key == "" {
				return badRequest("descriptor %d entry %d: empty key", i, j)
			}
			if len(en.Key) > c.opts.MaxValueLen || len(en.Value) > c.opts.MaxValueLen {
				return badRequest("descriptor %d entry %d: key or value longer than %d bytes", i, j, c.opts.MaxValueLen)
			}
		}
		if d.Hits != nil && *d.Hits > math.MaxUint32 {
			return badRequest("descriptor %d: hits_addend %d: at most %d", i, *d.Hits, uint32(math.MaxUint32))
		}
		if o := d.Override; o != nil && !o.Unit.Valid() {
			return badRequest("descriptor %d: limit override: unit %d is not second, minute, hour, day, week, month or year", i, int32(o.Unit))
		}
	}
	return nil
}

// validateEnvoyproxy checks what envoyproxy/ratelimit cannot answer either:
// a hits_addend Redis cannot add, an override with no unit.
func (c *Compiler) validateEnvoyproxy(req *Request) error {
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if d.Hits != nil && *d.Hits > math.MaxInt64 {
			return badRequest("descriptor %d: hits_addend %d: at most %d", i, *d.Hits, int64(math.MaxInt64))
		}
		if o := d.Override; o != nil && !o.Unit.Valid() {
			return badRequest("descriptor %d: limit override: unit %d is not second, minute, hour, day, month or year", i, int32(o.Unit))
		}
	}
	return nil
}

// Code is a descriptor's or a request's verdict, numbered as Envoy's
// RateLimitResponse.Code (so the zero value, unknown, is never answered).
type Code int32

// The codes.
const (
	OK        Code = 1
	OverLimit Code = 2
)

// String returns the code as Envoy names it: OK, OVER_LIMIT or UNKNOWN.
func (c Code) String() string {
	switch c {
	case OK:
		return "OK"
	case OverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// CodeOf returns the request's code under v: OverLimit when refused.
func CodeOf(v *engine.Verdict) Code {
	if v.Allowed {
		return OK
	}
	return OverLimit
}

// Code returns the code of the request p compiled under v, its verdict:
// CodeOf, but OK when only quota hits refused and, under
// Options.QuotaMode, a descriptor without a limit is a quota that passes.
func (p *Plan) Code(v *engine.Verdict) Code {
	if v.Allowed || !p.quotaPasses {
		return CodeOf(v)
	}
	for _, i := range v.Violated {
		if !v.Results[i].Rule.QuotaMode {
			return OverLimit
		}
	}
	return OK
}

// Status is the verdict on one descriptor, as the Envoy door and the check
// API report it.
type Status struct {
	// Code is OverLimit when this descriptor refuses the request.
	Code Code
	// Limit is the limit that applied; nil when none did (no match, a
	// replaced limit, or an unlimited one).
	Limit *Limit
	// Outcome is the engine's outcome for the descriptor's hit; empty when
	// it had none.
	Outcome engine.Outcome
	// Unlimited reports a match on an unlimited limit.
	Unlimited bool
	// Shadow reports a shadow_mode limit: counted, never refusing.
	Shadow bool
	// CheckOnly reports a descriptor hits_addend of 0: looked at, not counted.
	CheckOnly bool
	// Counted reports that the descriptor's hits were counted in the store.
	Counted bool
	// Failure is the failure policy that decided the descriptor because the
	// store failed (see engine.Result.Failure); its Remaining and times are
	// then not the shared count's.
	Failure portero.FailurePolicy
	// Cost is the hits the descriptor asked for.
	Cost int64
	// Remaining is what is available under the limit now, in hits
	// (MaxUint32 for unlimited).
	Remaining int64
	// ResetAfter is duration_until_reset: for envoyproxy/ratelimit's fixed
	// windows the time to the end of the current window (also when nothing
	// is counted yet), for a calendar quota the time to the end of its
	// period, otherwise the time until the limit is whole again.
	ResetAfter time.Duration
	// RetryAfter is, when Code is OverLimit and the request can pass
	// later, the time after which it could; 0 for a cost that can never
	// pass.
	RetryAfter time.Duration
}

// Status returns the status of descriptor i under v, the verdict on p.Hits
// decided at now.
func (p *Plan) Status(i int, v *engine.Verdict, now time.Time) Status {
	pd := &p.Descriptors[i]
	st := Status{Code: OK, Limit: pd.Limit}
	if pd.Limit != nil && pd.Limit.Unlimited {
		st.Limit, st.Unlimited, st.Remaining = nil, true, math.MaxUint32
		return st
	}
	if pd.Hit < 0 || pd.Hit >= len(v.Results) {
		return st
	}
	res := &v.Results[pd.Hit]
	d := res.Decision
	st.Outcome, st.Shadow, st.CheckOnly, st.Failure, st.Cost = res.Outcome, res.Rule.Shadow, res.CheckOnly, res.Failure, res.Cost
	st.Remaining = max(d.Remaining, 0)
	st.Counted = (res.Outcome == engine.Allowed || res.Outcome == engine.NearLimit) &&
		(res.Failure == "" || res.Failure == portero.FailLocal)
	st.ResetAfter = res.UntilReset(now)
	switch {
	case res.Rule.Shadow:
	case res.Outcome == engine.Refused:
		st.Code, st.RetryAfter = OverLimit, d.RetryAfter
		if st.RetryAfter <= 0 {
			st.RetryAfter = max(st.ResetAfter, time.Millisecond)
		}
	case res.Outcome == engine.CanNeverPass:
		st.Code = OverLimit
	}
	return st
}

// Observer is told what became of every request a door compiled and
// decided: the metrics of `portero rls` count them. Observe must be quick
// and safe for concurrent use, and must not keep req, p or v, which the
// door reuses.
type Observer interface {
	// Observe reports one request: compiled into p and decided into v in
	// took (err nil), or answered with err instead of a verdict: a
	// *RequestError (bad input, an unknown domain), the engine's error
	// (the store failed under portero.FailError) or the caller's context
	// error. After a compile error, p is what was compiled so far and v
	// is empty.
	Observe(req *Request, p *Plan, v *engine.Verdict, took time.Duration, err error)
}
