// Package engine is Portero's one decision engine: every door (the
// middleware, the gateway, the gRPC door, the Envoy rate limit service, the
// HTTP check API, `portero sim replay`) hands it the hits of a request, as
// a compiler (package policy or descriptor) built them, and turns its
// verdict into the door's protocol; package engine/header writes the
// verdict's RateLimit and Retry-After fields. A door is a protocol's way
// in: it translates, the engine decides.
//
// The engine alone owns all-or-nothing across the hits of a request (or
// envoyproxy/ratelimit's CountEach), quota rules, shadow rules, check-only
// hits, a cost a rule can never admit, concurrency leases (Admit), the
// failure policy when the store fails, settlements after the response
// (Settle), and the verdict. It imports only the standard library and
// Portero's core, and takes the instant as a parameter.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
	"github.com/portero-rl/portero/store/memstore"
)

// Defaults of the zero Options fields.
const (
	// DefaultNearLimit is the share of a limit used from which an admitted
	// hit is NearLimit (envoyproxy/ratelimit's NEAR_LIMIT_RATIO).
	DefaultNearLimit = 0.8
	// DefaultRetryAfterOnFailure is the retry time of a FailDeny refusal.
	DefaultRetryAfterOnFailure = time.Second
	// DefaultLocalMaxKeys caps the keys per rule of the FailLocal memory
	// (about 2.5 MB per rule for the fixed-size algorithms).
	DefaultLocalMaxKeys = 1 << 16
	// DefaultLeaseRetryAfter is the longest retry time of a refusal by a
	// concurrency rule.
	DefaultLeaseRetryAfter = time.Second
)

// Options configure an Engine. Store is required; the zero value of every
// other field is its documented default.
type Options struct {
	// Store keeps the counters. Required. The engine does not close it.
	Store portero.Store
	// OnError is what the engine does when the store fails: FailAllow (the
	// meaning of the empty policy, for every door), FailDeny, FailLocal, or
	// FailError, which makes Decide return the error for the door to report.
	OnError portero.FailurePolicy
	// LocalShare is the share of each limit (count, burst and rate) this
	// instance admits from its own memory under FailLocal, in (0, 1]; 0
	// means 1. With N instances, 1/N keeps the total near the limit.
	LocalShare float64
	// LocalMaxKeys caps the keys per rule of the FailLocal memory (a
	// memstore without a sweeper: the engine owns no goroutine); 0 means
	// DefaultLocalMaxKeys.
	LocalMaxKeys int
	// RetryAfterOnFailure is the retry time of a FailDeny refusal; 0 means
	// DefaultRetryAfterOnFailure.
	RetryAfterOnFailure time.Duration
	// NearLimit is the share of a limit used from which an admitted hit's
	// outcome is NearLimit, in (0, 1]; 0 means DefaultNearLimit.
	NearLimit float64
	// Leases hands out the leases of concurrency rules (Admit); nil means
	// Store when it is a portero.LeaseStore.
	Leases portero.LeaseStore
	// LeaseRetryAfter is the longest a refusal by a concurrency rule asks
	// the client to wait (a slot usually comes back when a request ends);
	// 0 means DefaultLeaseRetryAfter.
	LeaseRetryAfter time.Duration
	// Counting is how the hits of a request are counted: AllOrNothing (the
	// default when empty) or envoyproxy/ratelimit's CountEach.
	Counting Counting
	// StopIncrementWhenOver is envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT under CountEach: when a hit
	// would go over its limit, only the hits that would go over count.
	StopIncrementWhenOver bool
	// CounterJitter, under CountEach, adds a random time below it to each
	// counter's life (envoyproxy/ratelimit's EXPIRATION_JITTER_MAX_SECONDS);
	// 0 means none.
	CounterJitter time.Duration
	// OverLimitCache, under CountEach, is envoyproxy/ratelimit's local
	// cache (each.go); nil for none.
	OverLimitCache OverLimitCache
	// ShadowAll admits every request its rules refuse, as
	// envoyproxy/ratelimit's SHADOW_MODE: the results keep their refusals
	// and Verdict.Shadowed says the request would have been refused.
	ShadowAll bool
}

// Engine decides requests against a store. It is immutable and safe for
// concurrent use; it starts no goroutine, so there is nothing to close.
type Engine struct {
	store      portero.Store
	leases     portero.LeaseStore // nil: concurrency rules cannot be admitted
	onError    portero.FailurePolicy
	retry      time.Duration
	leaseRetry time.Duration
	near       float64
	local      *localStore // FailLocal only

	counting     Counting
	stopWhenOver bool
	jitter       time.Duration
	overCache    OverLimitCache
	shadowAll    bool
}

// New validates o and returns an engine, or every problem of o at once.
func New(o Options) (*Engine, error) {
	if o.Store == nil {
		return nil, errors.New("engine: a store is required")
	}
	o.OnError, o.Counting = cmp.Or(o.OnError, portero.FailAllow), cmp.Or(o.Counting, AllOrNothing)
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("engine: "+format, args...))
		}
	}
	check(o.OnError.Valid(), "on error: %q: want allow, deny, local or error", string(o.OnError))
	check(o.Counting.Valid(), "counting %q: want %s or %s", string(o.Counting), AllOrNothing, CountEach)
	check(o.LocalShare >= 0 && o.LocalShare <= 1, "local share %v: want a share in (0, 1]", o.LocalShare)
	check(o.NearLimit >= 0 && o.NearLimit <= 1, "near limit %v: want a share in (0, 1]", o.NearLimit)
	check(o.LocalMaxKeys >= 0, "local max keys %d: must not be negative", o.LocalMaxKeys)
	check(o.RetryAfterOnFailure >= 0, "retry after on failure %v: must not be negative", o.RetryAfterOnFailure)
	check(o.CounterJitter >= 0, "counter jitter %v: must not be negative", o.CounterJitter)
	check(o.LeaseRetryAfter >= 0, "lease retry after %v: must not be negative", o.LeaseRetryAfter)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.Leases == nil {
		o.Leases, _ = o.Store.(portero.LeaseStore)
	}
	retry := cmp.Or(o.RetryAfterOnFailure, DefaultRetryAfterOnFailure)
	e := &Engine{store: o.Store, leases: o.Leases, onError: o.OnError, retry: retry, leaseRetry: cmp.Or(o.LeaseRetryAfter, DefaultLeaseRetryAfter),
		near: cmp.Or(o.NearLimit, DefaultNearLimit), counting: o.Counting, stopWhenOver: o.StopIncrementWhenOver, jitter: o.CounterJitter, overCache: o.OverLimitCache,
		shadowAll: o.ShadowAll}
	if o.OnError == portero.FailLocal {
		mem, err := memstore.New(memstore.Config{MaxKeys: cmp.Or(o.LocalMaxKeys, DefaultLocalMaxKeys), SweepInterval: -1})
		if err != nil {
			return nil, fmt.Errorf("engine: local memory: %w", err)
		}
		e.local = &localStore{mem: mem, share: cmp.Or(o.LocalShare, 1), retry: retry}
	}
	return e, nil
}

// Store returns the store the engine decides in.
func (e *Engine) Store() portero.Store { return e.store }

// Leases returns the lease store the engine admits concurrency rules in;
// nil when it has none.
func (e *Engine) Leases() portero.LeaseStore { return e.leases }

// OnError returns the engine's failure policy.
func (e *Engine) OnError() portero.FailurePolicy { return e.onError }

// Counting returns how the engine counts.
func (e *Engine) Counting() Counting { return e.counting }

// Decide decides hits at instant now, all-or-nothing, into v, which it
// resets and whose memory it reuses; hits is only read. A refusal is a
// verdict with Allowed false, not an error.
//
// Hits that can never pass (a cost above Rule.MaxCost) and check-only hits
// are looked at first (portero.Store.Peek, at least one unit). When one
// refuses, the counted hits are only looked at too (NotCounted when one
// alone would pass). Otherwise they go to portero.Store.AllowAll in one
// call; when only shadow hits refuse, those are dropped and the rest asked
// again, so that a shadow rule never changes what the enforced ones count.
//
// When the store fails, the failure policy decides every hit afresh
// (Result.Failure, Verdict.Degraded): FailAllow admits uncounted, FailDeny
// refuses, FailLocal decides in this instance's memory; under FailError
// Decide returns an error wrapping portero.ErrStoreUnavailable. Other
// errors wrap ErrInvalidHit, among them a hit of a concurrency rule, which
// only Admit decides. After an error v holds no verdict.
func (e *Engine) Decide(ctx context.Context, now time.Time, hits []Hit, v *Verdict) error {
	v.reuse()
	if err := v.load(hits, false); err != nil {
		return err
	}
	return e.run(ctx, now, v)
}

// load puts one result per hit in v after checking it; leases allows the
// hits of concurrency rules (Admit).
func (v *Verdict) load(hits []Hit, leases bool) error {
	for i := range hits {
		h := &hits[i]
		switch {
		case h.Rule == nil:
			return fmt.Errorf("%w: hit %d: no rule", ErrInvalidHit, i)
		case !h.Rule.compiled:
			return fmt.Errorf("%w: hit %d: rule %q was not built with engine.NewRule", ErrInvalidHit, i, h.Rule.Name)
		case !h.CheckOnly && h.Cost <= 0:
			return fmt.Errorf("%w: hit %d: rule %q: cost %d: a counted hit costs at least 1", ErrInvalidHit, i, h.Rule.Name, h.Cost)
		case h.Rule.IsConcurrency():
			if err := leaseHit(h, i, leases); err != nil {
				return err
			}
		}
		v.Results = append(v.Results, Result{Hit: *h})
	}
	return nil
}

// run decides the rate hits of v in the store, or, when it fails, by the
// failure policy.
func (e *Engine) run(ctx context.Context, now time.Time, v *Verdict) error {
	err := e.decide(ctx, e.store, now, v)
	if err == nil {
		return nil
	}
	if !errors.Is(err, portero.ErrStoreUnavailable) {
		err = fmt.Errorf("%w: %w", portero.ErrStoreUnavailable, err)
	}
	var fallback portero.Store
	switch e.onError {
	case portero.FailError:
		v.Reset()
		return fmt.Errorf("engine: %w", err)
	case portero.FailLocal:
		fallback = e.local
	case portero.FailDeny:
		fallback = policyStore{retry: e.retry}
	default:
		fallback = policyStore{allow: true}
	}
	for i := range v.Results {
		r := &v.Results[i]
		if r.Rule.IsConcurrency() {
			continue // decided by Admit already
		}
		r.Decision, r.Outcome = portero.Decision{}, 0
	}
	v.Violated = v.Violated[:0]
	if ferr := e.decide(ctx, fallback, now, v); ferr != nil {
		v.Reset()
		return fmt.Errorf("engine: the store failed (%w) and so did the local fallback: %v", err, ferr)
	}
	v.Degraded = err
	for i := range v.Results {
		r := &v.Results[i]
		if r.Rule.IsConcurrency() {
			continue
		}
		r.Failure = e.onError
		if e.onError == portero.FailLocal {
			continue
		}
		// Made-up figures must not be announced.
		r.Decision.Remaining, r.Decision.ResetAfter = 0, 0
		if r.Outcome == NearLimit {
			r.Outcome = Allowed
		}
	}
	return nil
}

// decide fills v.Results from st; it returns st's first error.
func (e *Engine) decide(ctx context.Context, st portero.Store, now time.Time, v *Verdict) error {
	if _, policy := st.(policyStore); e.counting == CountEach && !policy {
		// FailAllow and FailDeny answer every hit alike, whatever the
		// counting: a FailDeny refusal's retry time is the policy's.
		return e.decideEach(ctx, st, now, v)
	}
	refused := v.blocked // a concurrency rule refused (Admit): count nothing
	for i := range v.Results {
		res := &v.Results[i]
		r := res.Rule
		never := r.maxCost == 0 || res.Cost > r.maxCost
		if !never && !res.CheckOnly {
			continue
		}
		var d portero.Decision
		if r.maxCost > 0 {
			cost := int64(1) // what stands now, for a hit that can never pass
			if !never {
				cost = max(res.Cost, 1)
			}
			var err error
			if d, err = look(ctx, st, now, res, cost); err != nil {
				return err
			}
		}
		switch {
		case never:
			d.Allowed, d.RetryAfter, d.Delay = false, 0, 0
			res.Outcome = CanNeverPass
			refused = refused || enforced(r)
		case d.Allowed:
			d.Delay = 0
			res.Outcome = CheckOnly
		case r.Shadow:
			res.Outcome = ShadowRefused
		default:
			res.Outcome = Refused
			refused = refused || !r.QuotaMode
		}
		res.Decision = d
	}
	if refused || quotaExhausted(v, nil, nil) {
		// Refused whatever the counted hits say: tell each where it stands.
		for i := range v.Results {
			res := &v.Results[i]
			if res.Outcome != 0 {
				continue
			}
			d, err := look(ctx, st, now, res, res.Cost)
			if err != nil {
				return err
			}
			switch {
			case d.Allowed:
				res.Outcome = NotCounted
			case res.Rule.Shadow:
				res.Outcome = ShadowRefused
			default:
				res.Outcome = Refused
			}
			res.Decision = d
		}
	} else if err := e.count(ctx, st, now, v); err != nil {
		return err
	}
	e.verdict(v)
	return nil
}

// verdict sets v.Allowed and v.Violated from the outcomes: the enforced
// hits that refused, and the quota hits when all of them refused. Under
// CountEach a shadow quota rule is, as in envoyproxy/ratelimit, a quota
// that passes. Under ShadowAll a refused request is admitted.
func (e *Engine) verdict(v *Verdict) {
	v.Allowed = true
	quotaOut := quotaExhausted(v, nil, nil) && !(e.counting == CountEach && hasShadowQuota(v))
	for i := range v.Results {
		res := &v.Results[i]
		if (res.Outcome == Refused || res.Outcome == CanNeverPass) && !res.Rule.Shadow && (!res.Rule.QuotaMode || quotaOut) {
			v.Violated = append(v.Violated, i)
			v.Allowed = false
		}
	}
	if e.shadowAll && !v.Allowed {
		v.Allowed, v.Shadowed, v.Violated = true, true, v.Violated[:0]
	}
}

// hasShadowQuota reports whether v has a hit of a shadow quota rule.
func hasShadowQuota(v *Verdict) bool {
	for i := range v.Results {
		if r := v.Results[i].Rule; r.QuotaMode && r.Shadow {
			return true
		}
	}
	return false
}

// enforced reports whether a refusal under r refuses the request by
// itself: neither a shadow rule nor a quota rule.
func enforced(r *Rule) bool { return !r.Shadow && !r.QuotaMode }

// quotaExhausted reports whether v has quota hits and all of them refused:
// by their outcome, or, for the hits at the indexes of active, by decs.
func quotaExhausted(v *Verdict, active []int, decs []portero.Decision) bool {
	n := 0
	for i := range v.Results {
		res := &v.Results[i]
		if !res.Rule.QuotaMode || res.Rule.Shadow {
			continue
		}
		n++
		refused := res.Outcome == Refused || res.Outcome == CanNeverPass
		for j, a := range active {
			if a == i {
				refused = !decs[j].Allowed
			}
		}
		if !refused {
			return false
		}
	}
	return n > 0
}

// count decides the counted hits (those without an outcome yet) in one
// AllowAll call, again without the shadow hits when only those refused.
func (e *Engine) count(ctx context.Context, st portero.Store, now time.Time, v *Verdict) error {
	active := v.active[:0]
	for i := range v.Results {
		if v.Results[i].Outcome == 0 {
			active = append(active, i)
		}
	}
	v.active = active
	hits := v.hits[:0]
	defer func() { v.hits = hits }()
	for len(active) > 0 {
		hits = hits[:0]
		for _, i := range active {
			res := &v.Results[i]
			hits = append(hits, portero.Hit{Rule: res.Rule.Rule, Key: res.Key, Cost: res.Cost, MaxDelay: res.MaxDelay})
		}
		decs, err := st.AllowAll(ctx, now, hits)
		if err != nil {
			return err
		}
		if len(decs) != len(hits) {
			return fmt.Errorf("%w: the store returned %d decisions for %d hits", portero.ErrStoreUnavailable, len(decs), len(hits))
		}
		enforcedRefused, shadowRefused := false, false
		for j, i := range active {
			v.Results[i].Decision = decs[j]
			if !decs[j].Allowed {
				if enforced(v.Results[i].Rule) {
					enforcedRefused = true
				} else {
					shadowRefused = true
				}
			}
		}
		// Quota hits refuse together or not at all.
		enforcedRefused = enforcedRefused || shadowRefused && quotaExhausted(v, active, decs)
		switch {
		case enforcedRefused:
			for _, i := range active {
				res := &v.Results[i]
				switch d := &res.Decision; {
				case d.Allowed:
					untaken(d, res.Cost)
					res.Outcome = NotCounted
				case res.Rule.Shadow:
					res.Outcome = ShadowRefused
				default:
					res.Outcome = Refused
				}
			}
			return nil
		case !shadowRefused:
			for _, i := range active {
				res := &v.Results[i]
				res.Outcome = Allowed
				if d := &res.Decision; float64(d.Limit-d.Remaining) >= e.near*float64(d.Limit) {
					res.Outcome = NearLimit
				}
			}
			return nil
		}
		next := active[:0] // filtered in place: next never overtakes active
		for _, i := range active {
			if res := &v.Results[i]; !res.Decision.Allowed {
				res.Outcome = ShadowRefused
				if !res.Rule.Shadow {
					res.Outcome = Refused // a quota hit: refused, the request not
				}
				continue
			}
			next = append(next, i)
		}
		active = next
	}
	return nil
}

// look peeks at res at cost, with its MaxDelay, which Store.Peek does not
// know: a queue place that would depart later refuses.
func look(ctx context.Context, st portero.Store, now time.Time, res *Result, cost int64) (portero.Decision, error) {
	d, err := st.Peek(ctx, res.Rule.Rule, res.Key, now, cost)
	if d.Allowed && res.MaxDelay > 0 && d.Delay > res.MaxDelay {
		d.Allowed, d.RetryAfter, d.Delay = false, d.Delay-res.MaxDelay, 0
	}
	return d, err
}

// untaken turns the decision of an admitted hit that AllowAll did not count
// (another hit refused the call) into about what stands now: cost more
// remaining, no delay; ResetAfter may still include the cost.
func untaken(d *portero.Decision, cost int64) {
	d.Remaining, d.Delay = min(d.Remaining+cost, d.Limit), 0
	if d.Remaining >= d.Limit {
		d.ResetAfter = 0
	}
}

// policyStore answers as FailAllow or FailDeny: every hit allowed, or
// refused for retry, with the rule's limit and no other figure.
type policyStore struct {
	allow bool
	retry time.Duration
}

func (p policyStore) decision(r portero.Rule) portero.Decision {
	lim := decisionLimit(r)
	if p.allow {
		return portero.Decision{Allowed: true, Limit: lim}
	}
	return portero.Decision{Limit: lim, RetryAfter: p.retry}
}

func (p policyStore) AllowAll(_ context.Context, _ time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	out := make([]portero.Decision, len(hits))
	for i, h := range hits {
		out[i] = p.decision(h.Rule)
	}
	return out, nil
}

func (p policyStore) Peek(_ context.Context, r portero.Rule, _ string, _ time.Time, _ int64) (portero.Decision, error) {
	return p.decision(r), nil
}

func (policyStore) Close(context.Context) error { return nil }

// decisionLimit is the Limit a store's decision carries for r: the count
// for the window algorithms, the burst for the others.
func decisionLimit(r portero.Rule) int64 {
	if windowed(r.Algorithm) {
		return r.Limit.Count
	}
	return r.Limit.Capacity()
}

// localStore is the FailLocal memory: a memstore in which every rule is
// scaled down to this instance's share; a hit whose cost exceeds its
// scaled rule refuses the call for the retry time of a failure.
type localStore struct {
	mem   *memstore.Store
	share float64
	retry time.Duration
}

func (l *localStore) rule(r portero.Rule) portero.Rule {
	r.Limit = scale(r.Limit, l.share)
	return r
}

func (l *localStore) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	scaled := make([]portero.Hit, len(hits))
	maxes := make([]int64, len(hits))
	over := false
	for i, h := range hits {
		sr := l.rule(h.Rule)
		max, err := algorithm.MaxCost(sr.Algorithm, sr.Limit)
		if err != nil {
			return nil, fmt.Errorf("local share of rule %q: %w", h.Rule.Name, err)
		}
		scaled[i], maxes[i] = portero.Hit{Rule: sr, Key: h.Key, Cost: h.Cost, MaxDelay: h.MaxDelay}, max
		over = over || h.Cost > max
	}
	if !over {
		return l.mem.AllowAll(ctx, now, scaled)
	}
	out := make([]portero.Decision, len(hits))
	for i, h := range scaled {
		if h.Cost > maxes[i] {
			out[i] = portero.Decision{Limit: maxes[i], RetryAfter: l.retry}
		} else {
			out[i] = portero.Decision{Allowed: true, Limit: maxes[i]}
		}
	}
	return out, nil
}

func (l *localStore) Peek(ctx context.Context, r portero.Rule, key string, now time.Time, cost int64) (portero.Decision, error) {
	sr := l.rule(r)
	max, err := algorithm.MaxCost(sr.Algorithm, sr.Limit)
	if err != nil {
		return portero.Decision{}, fmt.Errorf("local share of rule %q: %w", r.Name, err)
	}
	if cost > max {
		// More than this instance's share admits: refused, as AllowAll.
		return portero.Decision{Limit: max, RetryAfter: l.retry}, nil
	}
	return l.mem.Peek(ctx, sr, key, now, cost)
}

func (l *localStore) Close(ctx context.Context) error { return l.mem.Close(ctx) }

// scale returns l with its count, burst and rate multiplied by share, each
// rounded down to at least 1 unit.
func scale(l portero.Limit, share float64) portero.Limit {
	if share >= 1 {
		return l
	}
	sc := func(n int64) int64 { return max(1, int64(math.Floor(float64(n)*share))) }
	l.Count = sc(l.Count)
	if l.Burst > 0 {
		l.Burst = sc(l.Burst)
	}
	l.Rate *= share
	return l
}
