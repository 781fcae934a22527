package client

import (
	"math"
	"sync"
	"time"
)

// DefaultMaxHold is how long, at most, what one server says can hold back
// the requests to it: a Retry-After, a RateLimit t and a RateLimit-Policy w
// beyond it are cut to it. A day is the longest window of the draft's own
// examples ("daily";q=1000;w=86400).
const DefaultMaxHold = 24 * time.Hour

// maxPolicies bounds the policy names one Pacer remembers, so that what a
// server sends cannot grow a client's memory; names that hold nothing back
// any more are forgotten first.
const maxPolicies = 16

// Pacer keeps the requests of one client to one server (one host) within
// what the server announced, so that every goroutine sharing it stays within
// the quota instead of discovering it with a 429. A request goes only when
// all of these allow it:
//
//   - a token bucket per policy of RateLimit-Policy: "p";q=Q;w=W refills
//     at Q/W requests per second up to Q;
//   - a budget per item of RateLimit: "p";r=R;t=T allows R requests, less
//     those still in flight, within the next T seconds; while that window
//     is open, later items can only lower it (responses may arrive out of
//     order); items without t are ignored;
//   - a hold until a time, set from Retry-After with [Pacer.Block].
//
// W, T and holds are cut to the pacer's maximum hold ([NewPacerMaxHold]).
// Only request-count quotas are paced: other units (content-bytes,
// concurrent-requests) are ignored. A request that must wait is not queued:
// the caller sleeps and asks again, so that what arrives meanwhile (a 429,
// a lower r) counts before it goes. At most 16 policy names are kept, and
// those that hold nothing back are forgotten first.
//
// All methods take the time as a parameter and are safe for concurrent use;
// time that goes backwards is treated as no time passing.
type Pacer struct {
	mu        sync.Mutex
	maxHold   time.Duration
	policies  map[string]*policyState
	notBefore time.Time
	inFlight  int // requests Take let go whose Observe has not come yet
}

// policyState is what the pacer knows of one policy name.
type policyState struct {
	seen   time.Time // last response that named it
	skip   bool      // its unit is not requests: ignore limits that name it
	bucket *bucket   // from RateLimit-Policy
	budget *budget   // from RateLimit
}

type bucket struct {
	rate   float64 // tokens per second
	burst  float64
	window time.Duration
	tokens float64
	last   time.Time
}

type budget struct {
	remaining float64
	until     time.Time
}

// NewPacer returns an empty Pacer with the maximum hold DefaultMaxHold. It
// lets every request through at once until it observes a field that says
// otherwise.
func NewPacer() *Pacer { return NewPacerMaxHold(DefaultMaxHold) }

// NewPacerMaxHold returns an empty Pacer whose holds, windows and bucket
// refill times are cut to maxHold; maxHold <= 0 means DefaultMaxHold.
func NewPacerMaxHold(maxHold time.Duration) *Pacer {
	if maxHold <= 0 {
		maxHold = DefaultMaxHold
	}
	return &Pacer{maxHold: maxHold, policies: map[string]*policyState{}}
}

// tokensAt is the bucket's level at t, without changing it.
func (b *bucket) tokensAt(t time.Time) float64 {
	if !t.After(b.last) {
		return b.tokens
	}
	return math.Min(b.burst, b.tokens+b.rate*t.Sub(b.last).Seconds())
}

// quiet reports whether ps holds nothing back at now: no open budget, and
// no bucket or a full one.
func quiet(ps *policyState, now time.Time) bool {
	if ps.budget != nil && now.Before(ps.budget.until) {
		return false
	}
	return ps.bucket == nil || ps.bucket.tokensAt(now) >= ps.bucket.burst
}

// expire forgets the policies that hold nothing back and that no response
// has named for the maximum hold, and budgets whose window is over.
func (p *Pacer) expire(now time.Time) {
	for name, ps := range p.policies {
		if ps.budget != nil && !now.Before(ps.budget.until) {
			ps.budget = nil
		}
		if ps.budget == nil && ps.bucket == nil && !ps.skip || quiet(ps, now) && now.Sub(ps.seen) >= p.maxHold {
			delete(p.policies, name)
		}
	}
}

// policy returns the state of name, creating it if there is room: when
// maxPolicies names are known, the quiet one named least recently makes
// room; when none is quiet, name is not learnt (nil).
func (p *Pacer) policy(name string, now time.Time) *policyState {
	ps := p.policies[name]
	if ps == nil {
		if len(p.policies) >= maxPolicies {
			var oldest string
			for n, o := range p.policies {
				if quiet(o, now) && (oldest == "" || o.seen.Before(p.policies[oldest].seen)) {
					oldest = n
				}
			}
			if oldest == "" {
				return nil
			}
			delete(p.policies, oldest)
		}
		ps = &policyState{}
		p.policies[name] = ps
	}
	if now.After(ps.seen) {
		ps.seen = now
	}
	return ps
}

// Observe feeds the parsed fields of a response received at now into the
// pacer. Call it once for every request that Take let go, when its response
// arrives or it fails (then with nil fields), so the pacer knows how many
// are still in flight.
func (p *Pacer) Observe(now time.Time, policies []Policy, limits []Limit) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlight > 0 {
		p.inFlight--
	}
	p.expire(now)
	for _, pol := range policies {
		ps := p.policy(pol.Name, now)
		if ps == nil {
			continue
		}
		if pol.Unit != "requests" && pol.Unit != "request" && pol.Unit != "" {
			*ps = policyState{seen: ps.seen, skip: true}
			continue
		}
		ps.skip = false
		if pol.Quota <= 0 || pol.Window <= 0 {
			ps.bucket = nil // a zero quota cannot be paced; Retry-After covers it
			continue
		}
		q, w := float64(pol.Quota), min(pol.Window, p.maxHold)
		b := ps.bucket
		if b == nil {
			b = &bucket{tokens: q, last: now}
			ps.bucket = b
		}
		b.tokens, b.last = b.tokensAt(now), maxTime(b.last, now)
		b.rate, b.burst, b.window = q/w.Seconds(), q, w
		b.tokens = math.Min(b.tokens, q)
	}
	for _, l := range limits {
		if !l.HasWindow || l.Window <= 0 {
			continue
		}
		if ps := p.policies[l.Name]; ps != nil && ps.skip {
			continue
		}
		ps := p.policy(l.Name, now)
		if ps == nil {
			continue
		}
		r := float64(l.Remaining) - float64(p.inFlight)
		if bg := ps.budget; bg != nil && now.Before(bg.until) {
			// Responses can arrive out of order: while a window is open,
			// a later item may only lower what is left of it.
			bg.remaining = math.Min(bg.remaining, r)
			continue
		}
		ps.budget = &budget{remaining: r, until: now.Add(min(l.Window, p.maxHold))}
	}
}

// Block keeps every request from going before now+d, as a Retry-After
// received at now does; d is cut to the pacer's maximum hold. A hold ending
// before the current one is ignored.
func (p *Pacer) Block(now time.Time, d time.Duration) {
	until := now.Add(min(d, p.maxHold))
	p.mu.Lock()
	defer p.mu.Unlock()
	if until.After(p.notBefore) {
		p.notBefore = until
	}
}

// HeldUntil returns when the current Retry-After hold ends (see
// [Pacer.Block]); a time not after now means there is none.
func (p *Pacer) HeldUntil() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notBefore
}

// Delay reports how long after at a request would have to wait, if nothing
// changed meanwhile. It books nothing.
func (p *Pacer) Delay(at time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay(at)
}

// Take reports how long a request wanting to go at now must wait. When it
// returns 0 the request is counted against every bucket and budget and as in
// flight, and must be sent now (and then reported with Observe); otherwise
// nothing is counted and the caller should wait that long and call Take
// again.
func (p *Pacer) Take(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.delay(now); w > 0 {
		return w
	}
	p.expire(now)
	for _, ps := range p.policies {
		if b := ps.bucket; b != nil {
			b.tokens, b.last = b.tokensAt(now)-1, maxTime(b.last, now)
		}
		if bg := ps.budget; bg != nil {
			bg.remaining--
		}
	}
	p.inFlight++
	return 0
}

// idle reports whether the pacer holds nothing back at now and no request
// it let go is still in flight, so forgetting it loses nothing that the
// next response would not teach again.
func (p *Pacer) idle(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlight > 0 || p.notBefore.After(now) {
		return false
	}
	for _, ps := range p.policies {
		if !quiet(ps, now) {
			return false
		}
	}
	return true
}

// size is how many policy names the pacer remembers.
func (p *Pacer) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.policies)
}

func (p *Pacer) delay(at time.Time) time.Duration {
	var w float64 // seconds
	if p.notBefore.After(at) {
		w = p.notBefore.Sub(at).Seconds()
	}
	for _, ps := range p.policies {
		if b := ps.bucket; b != nil {
			if tk := b.tokensAt(at); tk < 1 {
				w = math.Max(w, (1-tk)/b.rate)
			}
		}
		if bg := ps.budget; bg != nil && at.Before(bg.until) && bg.remaining < 1 {
			w = math.Max(w, bg.until.Sub(at).Seconds())
		}
	}
	ns := math.Ceil(w * float64(time.Second))
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
