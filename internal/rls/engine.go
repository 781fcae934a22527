package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config/envoyconf"
)

// Code is a descriptor's or a request's verdict, numbered as Envoy's
// RateLimitResponse.Code (so the zero value, unknown, is never answered).
type Code int32

// The codes.
const (
	OK        Code = 1
	OverLimit Code = 2
)

func (c Code) String() string {
	switch c {
	case OK:
		return "OK"
	case OverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// Override is the limit Envoy may attach to a descriptor, used instead of
// the configuration (a fixed window of RequestsPerUnit per Unit).
type Override struct {
	RequestsPerUnit uint32
	Unit            envoyconf.Unit
}

// Descriptor is one request descriptor.
type Descriptor struct {
	// Entries are the ordered (key, value) pairs; at least one.
	Entries []envoyconf.Entry
	// Override, when set, replaces the configured limit.
	Override *Override
	// Hits is the descriptor's own hits_addend: nil when unset (the
	// request's applies), 0 to check without counting.
	Hits *uint64
}

// Request is one ShouldRateLimit call without the protobuf types.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Hits is the request's hits_addend; 0 means 1.
	Hits uint32
}

// Status is the verdict on one descriptor.
type Status struct {
	// Code is OverLimit when this descriptor refuses the request.
	Code Code
	// Limit is the limit that applied; nil when none did (no match, a
	// limit replaced by another, or unlimited).
	Limit *envoyconf.RateLimit
	// Unlimited reports a match on an unlimited rule.
	Unlimited bool
	// Shadow reports a shadow_mode rule: counted, never refusing. ShadowOver
	// says it would have refused.
	Shadow, ShadowOver bool
	// CheckOnly reports a descriptor hits_addend of 0: looked at, not counted.
	CheckOnly bool
	// Counted reports that the descriptor's hits were committed to the store.
	Counted bool
	// Degraded reports that the store's failure policy decided this
	// descriptor (portero.Decision.Degraded): Remaining and ResetAfter are
	// no shared count, and no RateLimit item is sent for it.
	Degraded bool
	// Cost is the hits the descriptor asked for.
	Cost int64
	// Remaining is what is left under the limit now, in hits (MaxUint32
	// for unlimited).
	Remaining int64
	// ResetAfter is the time until the limit is whole again (the end of the
	// window for a fixed window).
	ResetAfter time.Duration
	// RetryAfter is, when Code is OverLimit, the time after which the same
	// request could pass.
	RetryAfter time.Duration
}

// Response is the verdict on a whole request: OverLimit when any enforced
// descriptor refuses it, in which case no descriptor was counted.
type Response struct {
	Code     Code
	Statuses []Status
	// Degraded is set when the answer comes from the failure policy because
	// the store failed; it holds the store's error.
	Degraded error

	// inline holds Statuses for small requests, so that a response is one
	// allocation.
	inline [inlineStatuses]Status
}

// inlineStatuses is the number of descriptors a Response holds without a
// second allocation; Envoy's route actions rarely produce more.
const inlineStatuses = 2

// newResponse returns a response with n statuses, all OK.
func newResponse(n int) *Response {
	r := &Response{Code: OK}
	if n <= inlineStatuses {
		r.Statuses = r.inline[:n]
	} else {
		r.Statuses = make([]Status, n)
	}
	for i := range r.Statuses {
		r.Statuses[i].Code = OK
	}
	return r
}

// ErrorKind classifies request errors for the doors: gRPC codes and HTTP
// statuses.
type ErrorKind int

// The request error kinds.
const (
	InvalidArgument ErrorKind = iota + 1
	NotFound
)

// RequestError reports a request that cannot be decided: bad input
// (InvalidArgument) or an unknown domain (NotFound).
type RequestError struct {
	Kind ErrorKind
	Msg  string
}

func (e *RequestError) Error() string { return e.Msg }

func badRequest(format string, args ...any) error {
	return &RequestError{Kind: InvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

// FailurePolicy says what a door answers when the store fails.
type FailurePolicy int

// The failure policies.
const (
	// FailError reports the failure to the caller: gRPC UNAVAILABLE for
	// Envoy (whose failure_mode_deny then decides), HTTP 503 for the check
	// API.
	FailError FailurePolicy = iota
	// FailOpen answers OK: every request passes while the store is down.
	FailOpen
	// FailClosed answers OVER_LIMIT for every descriptor that has a limit.
	FailClosed
)

// ParseFailurePolicy reads "error", "open" (or "allow") and "closed" (or
// "deny").
func ParseFailurePolicy(s string) (FailurePolicy, error) {
	switch strings.ToLower(s) {
	case "error", "":
		return FailError, nil
	case "open", "allow":
		return FailOpen, nil
	case "closed", "deny":
		return FailClosed, nil
	}
	return 0, fmt.Errorf("failure policy %q: want error, open or closed", s)
}

func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "error"
}

// Options configure an Engine. The zero value of every field but Store and
// Limits means the default.
type Options struct {
	// Store keeps the counters. Required. The engine does not close it.
	Store portero.Store
	// Limits is the configuration to start with; nil means no domains (set
	// one later with SetLimits).
	Limits *envoyconf.Config
	// AllowUnknownDomains answers OK without a limit for a domain that is
	// not configured, as envoyproxy/ratelimit does. By default such a
	// request is an error (gRPC NOT_FOUND), so that a typo is seen.
	AllowUnknownDomains bool
	// MaxDescriptors and MaxEntries bound one request (default 64 and 32),
	// MaxValueLen one key or value in bytes (default 1024).
	MaxDescriptors, MaxEntries, MaxValueLen int
	// RetryAfterOnFailure is the Retry-After of a FailClosed answer
	// (default 1s).
	RetryAfterOnFailure time.Duration
	// MaxOverrides caps the distinct limit overrides (domain, descriptor
	// keys, requests_per_unit and unit) the engine turns into store rules
	// over its life; DefaultMaxOverrides when zero. Descriptor values do not
	// count: they are keys of the override's rule, bounded by the store's
	// max_keys and expiring with its window. A store keeps every rule it
	// was asked about, so a request with a new override beyond the cap is
	// refused as invalid rather than growing memory.
	MaxOverrides int
}

// DefaultMaxOverrides is the default of Options.MaxOverrides: far more
// distinct override limits than an Envoy route configuration produces, and
// at most a few megabytes of store rules.
const DefaultMaxOverrides = 1024

// Engine decides RLS requests against an envoyproxy/ratelimit configuration
// and a portero.Store. It is safe for concurrent use; the configuration can
// be swapped at any time with SetLimits.
type Engine struct {
	opts   Options
	limits atomic.Pointer[envoyconf.Config]

	ovMu      sync.RWMutex
	overrides map[overrideKey]*envoyconf.RateLimit // at most opts.MaxOverrides
}

// overrideKey identifies the rule of a limit override: its values are
// store keys under it, not part of it.
type overrideKey struct {
	domain, keys string
	rpu          uint32
	unit         envoyconf.Unit
}

// NewEngine validates o and returns an engine.
func NewEngine(o Options) (*Engine, error) {
	if o.Store == nil {
		return nil, errors.New("rls: a store is required")
	}
	if o.MaxDescriptors <= 0 {
		o.MaxDescriptors = 64
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 32
	}
	if o.MaxValueLen <= 0 {
		o.MaxValueLen = 1024
	}
	if o.RetryAfterOnFailure <= 0 {
		o.RetryAfterOnFailure = time.Second
	}
	if o.MaxOverrides <= 0 {
		o.MaxOverrides = DefaultMaxOverrides
	}
	e := &Engine{opts: o, overrides: map[overrideKey]*envoyconf.RateLimit{}}
	e.limits.Store(o.Limits)
	return e, nil
}

// SetLimits replaces the configuration; requests in flight finish with the
// old one. Counters of rules that did not change are kept.
func (e *Engine) SetLimits(c *envoyconf.Config) { e.limits.Store(c) }

// Limits returns the current configuration.
func (e *Engine) Limits() *envoyconf.Config { return e.limits.Load() }

// item is a descriptor with a limit to decide.
type item struct {
	idx      int
	rl       *envoyconf.RateLimit
	key      string
	cost     int64
	shadow   bool
	forced   bool // over the limit without asking: blocked or cost > MaxCost
	replaced bool // another matched limit replaces this one
}

// scratch holds the per-call working slices of Decide, reused through
// scratchPool so that a decision allocates only its response, its store
// keys and what the store itself allocates. Stores must not keep the hits
// slice they are given after they return (as package policy also
// requires).
type scratch struct {
	items, count, peek []item
	hits               []portero.Hit
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxPooledItems bounds the slices kept in the pool, so that one huge
// request does not pin its memory.
const maxPooledItems = 256

func (sc *scratch) release() {
	if cap(sc.items) > maxPooledItems || cap(sc.count) > maxPooledItems || cap(sc.peek) > maxPooledItems || cap(sc.hits) > maxPooledItems+2 {
		return
	}
	// Drop the references to keys and limits so the pool does not keep
	// them alive.
	clear(sc.items[:cap(sc.items)])
	clear(sc.count[:cap(sc.count)])
	clear(sc.peek[:cap(sc.peek)])
	clear(sc.hits[:cap(sc.hits)])
	scratchPool.Put(sc)
}

// Decide answers req at instant now. A refusal is a Response with Code
// OverLimit, not an error. Errors are *RequestError for bad input or an
// unknown domain, or the store's error (see FailurePolicy and
// FailureResponse for what a door does with it).
func (e *Engine) Decide(ctx context.Context, now time.Time, req *Request) (*Response, error) {
	if err := e.validate(req); err != nil {
		return nil, err
	}
	cfg := e.limits.Load()
	dom := cfg.Domain(req.Domain)
	if dom == nil && !e.opts.AllowUnknownDomains {
		return nil, &RequestError{Kind: NotFound, Msg: fmt.Sprintf("unknown domain %q (configured: %s)", req.Domain, strings.Join(cfg.Domains(), ", "))}
	}
	reqHits := int64(req.Hits)
	if reqHits == 0 {
		reqHits = 1
	}
	resp := newResponse(len(req.Descriptors))
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	items := sc.items[:0]
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		st := &resp.Statuses[i]
		var rl *envoyconf.RateLimit
		var m envoyconf.Match
		shadow := false
		if dom != nil && d.Override != nil {
			// In an unknown domain (AllowUnknownDomains) an override is
			// ignored, as envoyproxy/ratelimit ignores it: no rule is made.
			var err error
			if rl, err = e.override(req.Domain, d); err != nil {
				return nil, badRequest("descriptor %d: %v", i, err)
			}
		} else if dom != nil {
			m = dom.Match(d.Entries)
			rl = m.Limit
			shadow = m.Node != nil && m.Node.ShadowMode
		}
		if rl == nil {
			continue
		}
		if rl.Unlimited {
			st.Unlimited, st.Remaining = true, math.MaxUint32
			continue
		}
		cost := reqHits
		if d.Hits != nil {
			cost = int64(*d.Hits) // validated ≤ MaxUint32
		}
		it := item{idx: i, rl: rl, cost: cost, shadow: shadow}
		it.key = envoyconf.StoreKey(req.Domain, d.Entries, m)
		it.forced = rl.Blocked() || cost > rl.MaxCost
		items = append(items, it)
	}
	items = applyReplaces(items)
	sc.items = items

	count, peek := sc.count[:0], sc.peek[:0]
	blocked := false
	for _, it := range items {
		st := &resp.Statuses[it.idx]
		st.Limit, st.Shadow, st.Cost = it.rl, it.shadow, it.cost
		switch {
		case it.forced:
			if !it.shadow {
				blocked = true
			}
			if !it.rl.Blocked() {
				peek = append(peek, it)
			}
		case it.cost == 0:
			st.CheckOnly = true
			peek = append(peek, it)
		default:
			count = append(count, it)
		}
	}
	if blocked {
		// The request is refused whatever the store says: count nothing, but
		// still tell every descriptor where it stands.
		peek = append(peek, count...)
		count = count[:0]
	}
	sc.count, sc.peek = count, peek
	if len(count) > 0 {
		if err := e.count(ctx, now, resp, count, sc); err != nil {
			return nil, err
		}
	}
	if len(peek) > 0 {
		if err := e.peek(ctx, now, resp, peek, sc); err != nil {
			return nil, err
		}
	}
	for _, it := range items {
		if it.rl.Blocked() {
			st := &resp.Statuses[it.idx]
			st.Remaining = 0
			st.ResetAfter = windowRemainder(now, it.rl.Unit.Duration())
			st.RetryAfter = st.ResetAfter
			if it.shadow {
				st.ShadowOver = true
			} else {
				st.Code = OverLimit
			}
		}
	}
	for i := range resp.Statuses {
		if resp.Statuses[i].Code == OverLimit {
			resp.Code = OverLimit
		}
	}
	return resp, nil
}

// override returns the rule of d's limit override, one per distinct
// overrideKey, made once and kept (a store keeps its rules too), at most
// MaxOverrides of them.
func (e *Engine) override(domain string, d *Descriptor) (*envoyconf.RateLimit, error) {
	k := overrideKey{domain: domain, keys: envoyconf.DescriptorKeys(d.Entries), rpu: d.Override.RequestsPerUnit, unit: d.Override.Unit}
	e.ovMu.RLock()
	rl := e.overrides[k]
	e.ovMu.RUnlock()
	if rl != nil {
		return rl, nil
	}
	rl, err := envoyconf.OverrideRule(domain, d.Entries, k.rpu, k.unit)
	if err != nil {
		return nil, err
	}
	e.ovMu.Lock()
	defer e.ovMu.Unlock()
	if old := e.overrides[k]; old != nil {
		return old, nil
	}
	if len(e.overrides) >= e.opts.MaxOverrides {
		return nil, fmt.Errorf("limit override %d/%s: more than %d distinct limit overrides (domain, keys, requests_per_unit, unit) since start; each is a rule the store keeps", k.rpu, k.unit, e.opts.MaxOverrides)
	}
	e.overrides[k] = rl
	return rl, nil
}

// applyReplaces drops, in place, the limits that another matched limit
// replaces (rate_limit.replaces), as envoyproxy/ratelimit does: a limit is
// dropped when any matched limit (dropped or not) names it.
func applyReplaces(items []item) []item {
	has := false
	for _, it := range items {
		if len(it.rl.Replaces) > 0 {
			has = true
			break
		}
	}
	if !has {
		return items
	}
	for i := range items {
		name := items[i].rl.Name
		if name == "" {
			continue
		}
		for _, by := range items {
			if slices.Contains(by.rl.Replaces, name) {
				items[i].replaced = true
				break
			}
		}
	}
	out := items[:0]
	for _, it := range items {
		if !it.replaced {
			out = append(out, it)
		}
	}
	return out
}

func (e *Engine) validate(req *Request) error {
	if req == nil {
		return badRequest("empty request")
	}
	if req.Domain == "" {
		return badRequest("domain is required")
	}
	if len(req.Domain) > e.opts.MaxValueLen {
		return badRequest("domain longer than %d bytes", e.opts.MaxValueLen)
	}
	if len(req.Descriptors) == 0 {
		return badRequest("at least one descriptor is required")
	}
	if len(req.Descriptors) > e.opts.MaxDescriptors {
		return badRequest("%d descriptors: at most %d per request", len(req.Descriptors), e.opts.MaxDescriptors)
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if len(d.Entries) == 0 {
			return badRequest("descriptor %d: at least one entry is required", i)
		}
		if len(d.Entries) > e.opts.MaxEntries {
			return badRequest("descriptor %d: %d entries: at most %d", i, len(d.Entries), e.opts.MaxEntries)
		}
		for j, en := range d.Entries {
			if en.Key == "" {
				return badRequest("descriptor %d entry %d: empty key", i, j)
			}
			if len(en.Key) > e.opts.MaxValueLen || len(en.Value) > e.opts.MaxValueLen {
				return badRequest("descriptor %d entry %d: key or value longer than %d bytes", i, j, e.opts.MaxValueLen)
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

// count decides the counted items all-or-nothing. As in package policy,
// when only shadow rules refuse, they are dropped and the rest asked again,
// so that a shadow rule never changes what is counted for enforced ones.
func (e *Engine) count(ctx context.Context, now time.Time, resp *Response, items []item, sc *scratch) error {
	hits := sc.hits[:0]
	defer func() { sc.hits = hits }()
	active := items
	for {
		hits = hits[:0]
		for _, it := range active {
			hits = append(hits, portero.Hit{Rule: it.rl.Rule, Key: it.key, Cost: it.cost})
		}
		decs, err := e.opts.Store.AllowAll(ctx, now, hits)
		if err != nil {
			return err
		}
		if len(decs) != len(hits) {
			return fmt.Errorf("%w: store returned %d decisions for %d hits", portero.ErrStoreUnavailable, len(decs), len(hits))
		}
		enforcedRefused, shadowRefused := false, false
		for j, it := range active {
			if !decs[j].Allowed {
				if it.shadow {
					shadowRefused = true
				} else {
					enforcedRefused = true
				}
			}
		}
		if enforcedRefused || !shadowRefused {
			for j, it := range active {
				fill(&resp.Statuses[it.idx], it, decs[j], now, !enforcedRefused)
			}
			return nil
		}
		next := active[:0:0]
		for j, it := range active {
			if !decs[j].Allowed {
				fill(&resp.Statuses[it.idx], it, decs[j], now, false)
				continue
			}
			next = append(next, it)
		}
		active = next
		if len(active) == 0 {
			return nil
		}
	}
}

// peekRule and the two sentinel hits make a store call that is always
// refused: the second sentinel hit on the same key exceeds a limit of one.
// An all-or-nothing store then counts nothing and still returns, in order,
// the decision each earlier hit would have had (see portero.Store and
// storetest.Reference). That is how a descriptor is checked without being
// counted, through the plain Store interface.
var peekRule = portero.Rule{Name: "portero.rls.peek", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 1, Window: time.Hour}}

const peekKey = "portero.rls.peek"

// peek asks the store about items without counting anything: each with its
// own cost, or 1 for a check-only descriptor and for a cost the rule can
// never admit ("would one more pass?").
func (e *Engine) peek(ctx context.Context, now time.Time, resp *Response, items []item, sc *scratch) error {
	hits := sc.hits[:0]
	defer func() { sc.hits = hits }()
	for _, it := range items {
		hits = append(hits, portero.Hit{Rule: it.rl.Rule, Key: it.key, Cost: peekCost(it)})
	}
	hits = append(hits, portero.Hit{Rule: peekRule, Key: peekKey, Cost: 1}, portero.Hit{Rule: peekRule, Key: peekKey, Cost: 1})
	decs, err := e.opts.Store.AllowAll(ctx, now, hits)
	if err != nil {
		return err
	}
	if len(decs) != len(hits) {
		return fmt.Errorf("%w: store returned %d decisions for %d hits", portero.ErrStoreUnavailable, len(decs), len(hits))
	}
	if decs[len(decs)-1].Allowed {
		return fmt.Errorf("%w: store admitted a probe it must refuse (is AllowAll all-or-nothing?)", portero.ErrStoreUnavailable)
	}
	for j, it := range items {
		d := decs[j]
		st := &resp.Statuses[it.idx]
		st.Degraded = d.Degraded
		if d.Allowed {
			d.Remaining = min(d.Remaining+peekCost(it), d.Limit) // nothing was taken
		}
		st.Remaining = d.Remaining
		st.ResetAfter = resetAfter(it.rl, d, now)
		if !it.forced && d.Allowed {
			st.Code = OK
			continue
		}
		retry := d.RetryAfter
		if it.forced || retry <= 0 {
			// A cost this rule can never admit: come back when it is whole.
			retry = max(st.ResetAfter, retry)
		}
		if it.shadow {
			st.Code, st.ShadowOver = OK, true
			continue
		}
		st.Code, st.RetryAfter = OverLimit, max(retry, time.Millisecond)
	}
	return nil
}

func peekCost(it item) int64 {
	if it.cost <= 0 || it.forced {
		return 1
	}
	return it.cost
}

// fill writes the status of a counted item from its decision; committed
// says whether the store counted the call.
func fill(st *Status, it item, d portero.Decision, now time.Time, committed bool) {
	st.Counted = committed && d.Allowed
	st.Degraded = d.Degraded
	st.Remaining = d.Remaining
	if d.Allowed && !committed {
		st.Remaining = min(d.Remaining+it.cost, d.Limit) // nothing was taken
	}
	st.ResetAfter = resetAfter(it.rl, d, now)
	if d.Allowed {
		st.Code = OK
		return
	}
	if it.shadow {
		st.Code, st.ShadowOver = OK, true
		return
	}
	st.Code, st.RetryAfter = OverLimit, d.RetryAfter
}

// resetAfter is duration_until_reset: the end of the current window for
// envoyproxy/ratelimit's fixed windows (also when nothing is counted yet),
// the decision's ResetAfter for other algorithms.
func resetAfter(rl *envoyconf.RateLimit, d portero.Decision, now time.Time) time.Duration {
	if rl.Rule.Algorithm == portero.FixedWindow {
		return windowRemainder(now, rl.Rule.Limit.Window)
	}
	return max(d.ResetAfter, d.RetryAfter)
}

// windowRemainder returns the time from now to the end of its epoch-aligned
// window of length w.
func windowRemainder(now time.Time, w time.Duration) time.Duration {
	if w <= 0 {
		return 0
	}
	ns := now.UnixNano() % int64(w)
	if ns < 0 {
		ns += int64(w)
	}
	return w - time.Duration(ns)
}

// FailureResponse is what policy p answers for req when the store failed
// with err: nil for FailError (the door reports err), all OK for FailOpen,
// OVER_LIMIT on every descriptor that has a limit for FailClosed. Unknown
// domains and bad input are still errors, never a silent answer.
func (e *Engine) FailureResponse(req *Request, p FailurePolicy, err error) *Response {
	if p == FailError {
		return nil
	}
	resp := newResponse(len(req.Descriptors))
	resp.Degraded = err
	dom := e.limits.Load().Domain(req.Domain)
	for i := range req.Descriptors {
		st := &resp.Statuses[i]
		if p != FailClosed {
			continue
		}
		d := &req.Descriptors[i]
		var rl *envoyconf.RateLimit
		if dom != nil && d.Override != nil {
			rl, _ = e.override(req.Domain, d)
		} else if dom != nil {
			m := dom.Match(d.Entries)
			rl = m.Limit
			if m.Node != nil && m.Node.ShadowMode {
				rl = nil
			}
		}
		if rl == nil || rl.Unlimited {
			continue
		}
		st.Limit, st.Code, st.RetryAfter = rl, OverLimit, e.opts.RetryAfterOnFailure
		resp.Code = OverLimit
	}
	return resp
}

// Header is one response header.
type Header struct{ Name, Value string }

// Headers returns the response headers for resp, per
// draft-ietf-httpapi-ratelimit-headers-11: RateLimit-Policy with every
// enforced limit that applied ("name";q=requests_per_unit;w=unit seconds),
// RateLimit with their current state ("name";r=remaining;t=seconds) — only
// the refusing ones when the request is refused, and none for a limit a
// failure policy decided (Response.Degraded, Status.Degraded) — and, when
// refused, Retry-After in whole seconds (rounded up, at least 1). Shadow and
// unlimited rules are not announced. Several descriptors under one rule
// are announced once, with the state closest to exhaustion.
func (r *Response) Headers() []Header { return r.appendHeaders(nil) }

// maxHeaders is the most headers appendHeaders adds.
const maxHeaders = 3

// appendHeaders appends Headers to hs.
func (r *Response) appendHeaders(hs []Header) []Header {
	var tb [maxHeaders]headerText
	var vb [256]byte
	ts, _ := r.appendHeaderText(tb[:0], vb[:0])
	for _, t := range ts {
		v := t.str
		if t.bytes != nil {
			v = string(t.bytes)
		}
		hs = append(hs, Header{t.name, v})
	}
	return hs
}

// headerText is a header whose value is either static text (str, formatted
// once when the configuration was loaded) or bytes formatted for this
// response into a caller's buffer, so that a door writing them straight
// onto the wire allocates nothing.
type headerText struct {
	name, str string
	bytes     []byte
}

// appendHeaderText appends the headers of Headers to hs, formatting the
// values that change per response into buf.
func (r *Response) appendHeaderText(hs []headerText, buf []byte) ([]headerText, []byte) {
	type entry struct {
		lim *envoyconf.RateLimit
		st  *Status
	}
	var ebuf [4]entry
	ents := ebuf[:0]
	for i := range r.Statuses {
		st := &r.Statuses[i]
		if st.Limit == nil || st.Shadow || st.Unlimited {
			continue
		}
		dup := false
		for k := range ents {
			if ents[k].lim == st.Limit || ents[k].lim.PolicyName() == st.Limit.PolicyName() {
				dup = true
				if worse(st, ents[k].st) {
					ents[k].st = st
				}
			}
		}
		if !dup {
			ents = append(ents, entry{st.Limit, st})
		}
	}
	if len(ents) == 0 {
		if r.Code == OverLimit {
			return append(hs, headerText{name: "Retry-After", str: "1"}), buf
		}
		return hs, buf
	}
	// A single limit's RateLimit-Policy is its precomputed item.
	pol := headerText{name: "RateLimit-Policy", str: ents[0].st.Limit.PolicyItem()}
	if len(ents) > 1 {
		start := len(buf)
		for i, en := range ents {
			if i > 0 {
				buf = append(buf, ", "...)
			}
			// The limit of the state announced, as when the value was
			// formatted per request.
			buf = append(buf, en.st.Limit.PolicyItem()...)
		}
		pol = headerText{name: pol.name, bytes: buf[start:len(buf):len(buf)]}
	}
	start := len(buf)
	var retry int64
	for _, en := range ents {
		refused := en.st.Code == OverLimit
		if r.Code == OverLimit && !refused {
			continue
		}
		t := ceilSeconds(en.st.ResetAfter)
		if refused {
			t = max(ceilSeconds(en.st.RetryAfter), 1)
			retry = max(retry, t)
		}
		if r.Degraded != nil || en.st.Degraded {
			continue // a failure policy decided: no values to announce
		}
		if len(buf) > start {
			buf = append(buf, ", "...)
		}
		buf = append(buf, en.st.Limit.QuotedName()...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, max(en.st.Remaining, 0), 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, t, 10)
	}
	hs = append(hs, pol)
	if len(buf) > start {
		hs = append(hs, headerText{name: "RateLimit", bytes: buf[start:len(buf):len(buf)]})
	}
	if r.Code == OverLimit {
		start := len(buf)
		buf = strconv.AppendInt(buf, max(retry, 1), 10)
		hs = append(hs, headerText{name: "Retry-After", bytes: buf[start:len(buf):len(buf)]})
	}
	return hs, buf
}

// worse reports whether a is a more telling state than b: refused beats
// allowed, then the lower remaining fraction.
func worse(a, b *Status) bool {
	if (a.Code == OverLimit) != (b.Code == OverLimit) {
		return a.Code == OverLimit
	}
	la, lb := int64(a.Limit.RequestsPerUnit), int64(b.Limit.RequestsPerUnit)
	return a.Remaining*lb < b.Remaining*la
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Decision summarises resp the way the HTTP doors report it: the status
// that decided (the refusing one with the longest wait, or when allowed the
// one closest to exhaustion), or nil when no limit applied.
func (r *Response) Decision() *Status {
	var pick *Status
	for i := range r.Statuses {
		st := &r.Statuses[i]
		if st.Limit == nil || st.Shadow {
			continue
		}
		switch {
		case pick == nil:
			pick = st
		case r.Code == OverLimit:
			if st.Code == OverLimit && (pick.Code != OverLimit || st.RetryAfter > pick.RetryAfter) {
				pick = st
			}
		case worse(st, pick):
			pick = st
		}
	}
	return pick
}
