package client

import (
	"math"
	"sync"
	"time"
)

// Pacer keeps the requests of one client to one server (one host) within
// what the server announced, so that every goroutine sharing it stays within
// the quota instead of discovering it with a 429. It combines three rules,
// and a request goes only when all of them allow it:
//
//   - a token bucket per quota policy of RateLimit-Policy: "p";q=Q;w=W
//     refills at Q/W requests per second up to Q;
//   - a budget per item of RateLimit: "p";r=R;t=T allows no more than R
//     requests within the next T seconds (the draft's effective window),
//     less the requests still in flight (which R may not count yet); while
//     that window is open, later items can only lower what is left of it
//     (responses may arrive out of order), after it a new one starts;
//     items without t are ignored;
//   - a block until a time, set from Retry-After with [Pacer.Block].
//
// Only request-count quotas are paced: policies in other units
// (content-bytes, concurrent-requests) and the limits that refer to them are
// ignored. A request that must wait is not queued: the caller sleeps the
// returned duration and asks again, so information that arrives meanwhile
// (a 429, a lower r) is taken into account before it goes.
//
// All methods take the time as a parameter and are safe for concurrent use;
// time that goes backwards is treated as no time passing.
type Pacer struct {
	mu        sync.Mutex
	buckets   map[string]*bucket
	budgets   map[string]*budget
	skip      map[string]bool // policy names whose unit is not requests
	notBefore time.Time
	inFlight  int // requests Take let go whose Observe has not come yet
}

type bucket struct {
	rate   float64 // tokens per second
	burst  float64
	tokens float64
	last   time.Time
}

type budget struct {
	remaining float64
	until     time.Time
}

// NewPacer returns an empty Pacer, which lets every request through at once
// until it observes a field that says otherwise.
func NewPacer() *Pacer {
	return &Pacer{buckets: map[string]*bucket{}, budgets: map[string]*budget{}, skip: map[string]bool{}}
}

// tokensAt is the bucket's level at t, without changing it.
func (b *bucket) tokensAt(t time.Time) float64 {
	if !t.After(b.last) {
		return b.tokens
	}
	return math.Min(b.burst, b.tokens+b.rate*t.Sub(b.last).Seconds())
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
	for _, pol := range policies {
		if pol.Unit != "requests" && pol.Unit != "request" && pol.Unit != "" {
			p.skip[pol.Name] = true
			delete(p.buckets, pol.Name)
			delete(p.budgets, pol.Name)
			continue
		}
		delete(p.skip, pol.Name)
		if pol.Quota <= 0 || pol.Window <= 0 {
			delete(p.buckets, pol.Name) // a zero quota cannot be paced; Retry-After covers it
			continue
		}
		q := float64(pol.Quota)
		b := p.buckets[pol.Name]
		if b == nil {
			b = &bucket{tokens: q, last: now}
			p.buckets[pol.Name] = b
		}
		b.tokens, b.last = b.tokensAt(now), maxTime(b.last, now)
		b.rate, b.burst = q/pol.Window.Seconds(), q
		b.tokens = math.Min(b.tokens, q)
	}
	for _, l := range limits {
		if p.skip[l.Name] || !l.HasWindow || l.Window <= 0 {
			continue
		}
		r := float64(l.Remaining) - float64(p.inFlight)
		if bg := p.budgets[l.Name]; bg != nil && now.Before(bg.until) {
			// Responses can arrive out of order: while a window is open,
			// a later item may only lower what is left of it.
			bg.remaining = math.Min(bg.remaining, r)
			continue
		}
		p.budgets[l.Name] = &budget{remaining: r, until: now.Add(l.Window)}
	}
}

// Block keeps every request from going before until, as a Retry-After does.
// An earlier until than the current block is ignored.
func (p *Pacer) Block(until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until.After(p.notBefore) {
		p.notBefore = until
	}
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
	for _, b := range p.buckets {
		b.tokens, b.last = b.tokensAt(now)-1, maxTime(b.last, now)
	}
	for name, bg := range p.budgets {
		if !now.Before(bg.until) {
			delete(p.budgets, name)
			continue
		}
		bg.remaining--
	}
	p.inFlight++
	return 0
}

func (p *Pacer) delay(at time.Time) time.Duration {
	var w float64 // seconds
	if p.notBefore.After(at) {
		w = p.notBefore.Sub(at).Seconds()
	}
	for _, b := range p.buckets {
		if tk := b.tokensAt(at); tk < 1 {
			w = math.Max(w, (1-tk)/b.rate)
		}
	}
	for _, bg := range p.budgets {
		if at.Before(bg.until) && bg.remaining < 1 {
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
