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
	Entries  []Entry   // at least one
	Override *Override // replaces the configured limit
	// Hits is the descriptor's own hits_addend: nil when unset (the
	// request's applies), 0 to check without counting.
	Hits *uint64
	// Negative is is_negative_hits: an error, ignored under Envoyproxy as
	// envoyproxy/ratelimit ignores it.
	Negative bool
}

// Request is one ShouldRateLimit call without the protobuf types.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	Hits        uint32 // hits_addend; 0 means 1
}

// ErrorKind classifies request errors for the doors.
type ErrorKind int

// The request error kinds.
const (
	InvalidArgument ErrorKind = iota + 1 // gRPC INVALID_ARGUMENT, HTTP 400
	NotFound                             // an unknown domain: NOT_FOUND, 404
)

// RequestError reports a request that cannot be compiled.
type RequestError struct {
	Kind ErrorKind
	Msg  string
}

func (e *RequestError) Error() string { return e.Msg }

func badRequest(format string, args ...any) error {
	return &RequestError{Kind: InvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

// Options bound and tune a Compiler; a zero field means its default.
type Options struct {
	// AllowUnknownDomains compiles a request for an unknown domain into no
	// hits, as envoyproxy/ratelimit does, instead of a NotFound error.
	AllowUnknownDomains bool
	// MaxDescriptors and MaxEntries bound one request (default 64 and 32),
	// MaxValueLen one key or value in bytes (default 1024).
	MaxDescriptors, MaxEntries, MaxValueLen int
	// MaxOverrides caps the distinct limit overrides (keys,
	// requests_per_unit, unit: each a store rule) in use in one domain.
	// When full, a new one replaces the least recently used if idle
	// (OverrideIdle); otherwise the request is refused as invalid (under
	// Envoyproxy, compiled for that request alone) rather than growing
	// memory.
	MaxOverrides int
	// OverrideIdle is how long an override goes unused, and never less
	// than its unit, before another may take its place: its counters have
	// expired by then, so forgetting it changes no decision.
	OverrideIdle time.Duration
	// Envoyproxy compiles as envoyproxy/ratelimit: composite matching
	// (Domain.MatchEnvoyproxy), its cache keys (EnvoyproxyKey, KeyPrefix
	// its CACHE_KEY_PREFIX), unknown domains as no hits, and only its
	// bounds: a domain, one descriptor, hits_addend up to 2^63-1. A
	// descriptor without entries, or with an empty key, matches nothing.
	Envoyproxy bool
	KeyPrefix  string
	// QuotaMode is envoyproxy/ratelimit's QUOTA_MODE: every limited
	// descriptor is a quota, and one without a limit passes (Plan.Code).
	QuotaMode bool
}

// The defaults of Options.MaxOverrides and OverrideIdle: far more than an
// Envoy route configuration gives one domain, a few megabytes of rules.
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

// overrideKey identifies an override's rule in its domain (its values are
// store keys under it).
type overrideKey struct {
	keys string
	rpu  uint32
	unit Unit
}

// overrideTable holds the overrides in use in one domain.
type overrideTable struct {
	mu    sync.RWMutex
	byKey map[overrideKey]*overrideEntry
	// fullUntil is, while full and none idle, the Unix ns when one may be.
	fullUntil int64
}

type overrideEntry struct {
	limit *Limit
	used  atomic.Int64 // Unix ns of the latest request that named it
	idle  int64        // ns unused before it may be forgotten
}

// touch records a use at now, writing the shared word at most once a
// second (every core writing it would cost more than the decision).
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
// with the old one. Overrides of the domains still configured are kept.
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

// Plan is a compiled request: the engine's hits and what became of each
// request descriptor. A caller reuses its Plan (Reset keeps the memory).
type Plan struct {
	Hits        []engine.Hit // in descriptor order
	Descriptors []Planned    // one per request descriptor
	Of          []int        // per hit, its descriptor's index
	// quotaPasses: under QuotaMode, a descriptor without a limit passes.
	quotaPasses bool
}

// Planned is what became of one request descriptor.
type Planned struct {
	Limit *Limit // nil for no match, or a replaced limit
	Hit   int    // its index in Plan.Hits; -1 for none
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

// replace drops the hits of the limits any matched limit (dropped or not)
// names in its rate_limit.replaces, as envoyproxy/ratelimit does.
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

// override returns the limit of d's override in domain, made once per
// overrideKey and kept while used, at most MaxOverrides per domain.
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
			return l, nil // for this request alone, as envoyproxy/ratelimit answers any
		}
		return nil, fmt.Errorf("limit override %d/%s: domain %q has %d limit overrides in use (distinct keys, requests_per_unit and unit, each a rule the store keeps), the most it takes; one may be replaced in %v, once unused for %v or its unit",
			k.rpu, k.unit, domain, len(t.byKey), time.Duration(t.fullUntil-now).Round(time.Second), c.opts.OverrideIdle)
	}
	e = &overrideEntry{limit: l, idle: int64(max(c.opts.OverrideIdle, k.unit.Duration()))}
	e.used.Store(now)
	t.byKey[k] = e
	return l, nil
}

// forgetIdle drops the least recently used override if idle, and reports
// whether it did; otherwise it notes when one may be. t is locked.
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
		if err := validateHits(i, d, math.MaxUint32, "week, "); err != nil {
			return err
		}
	}
	return nil
}

// validateEnvoyproxy checks what envoyproxy/ratelimit cannot answer either:
// a hits_addend Redis cannot add, an override with no unit.
func (c *Compiler) validateEnvoyproxy(req *Request) error {
	for i := range req.Descriptors {
		if err := validateHits(i, &req.Descriptors[i], math.MaxInt64, ""); err != nil {
			return err
		}
	}
	return nil
}

// validateHits checks descriptor i's hits_addend against most and its
// override's unit (week named as a unit when week is "week, ").
func validateHits(i int, d *Descriptor, most uint64, week string) error {
	if d.Hits != nil && *d.Hits > most {
		return badRequest("descriptor %d: hits_addend %d: at most %d", i, *d.Hits, most)
	}
	if o := d.Override; o != nil && !o.Unit.Valid() {
		return badRequest("descriptor %d: limit override: unit %d is not second, minute, hour, day, %smonth or year", i, int32(o.Unit), week)
	}
	return nil
}

// Code is a descriptor's or a request's verdict, numbered as Envoy's
// RateLimitResponse.Code.
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

// Code returns the request's code under v: CodeOf, but OK when only quota
// hits refused and, under QuotaMode, some descriptor is a passing quota.
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

// Status is the verdict on one descriptor, as the Envoy rate limit service and the check
// API report it.
type Status struct {
	Code      Code
	Limit     *Limit         // nil for no match, a replaced or an unlimited limit
	Outcome   engine.Outcome // empty without a hit
	Unlimited bool
	Shadow    bool // counted, never refusing
	CheckOnly bool // hits_addend 0: looked at, not counted
	Counted   bool // its hits were counted in the store
	// Failure is the failure policy that decided because the store failed;
	// Remaining and the times are then not the shared count's.
	Failure   portero.FailurePolicy
	Cost      int64
	Remaining int64 // in hits; MaxUint32 for unlimited
	// ResetAfter is duration_until_reset (engine.Result.UntilReset).
	ResetAfter time.Duration
	// RetryAfter is, when OverLimit, when the request could pass; 0 for a
	// cost that never can.
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

// Observer is told what became of every request a server compiled and
// decided (the metrics of `portero rls`). Observe must be quick, safe for
// concurrent use, and keep neither req, p nor v, which the caller reuses.
type Observer interface {
	// Observe reports one request decided into v in took, or err instead:
	// a *RequestError, the engine's error or the context's. After a
	// compile error, p is what was compiled so far and v is empty.
	Observe(req *Request, p *Plan, v *engine.Verdict, took time.Duration, err error)
}
