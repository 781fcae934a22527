package client

import (
	"math"
	"sync"
	"time"
)

// Pacer is a client-side token bucket for one server (one host): it turns
// the RateLimit-Policy and RateLimit fields of responses, and Retry-After,
// into waits before later requests, so that every goroutine using the host
// stays within the announced quota instead of discovering it with a 429.
//
// It keeps one bucket per policy name. A policy "p";q=Q;w=W gives that bucket
// a rate of Q/W requests per second and a capacity of Q. A limit
// "p";r=R;t=T means "no more than R requests within the next T seconds", so
// the bucket's tokens are lowered (never raised) to R + 1 − rate·T: with
// tokens needing to reach 1 before a request may go, at most R requests fit
// before T has passed. When no policy named p was seen, the rate is taken to
// be R/T (1/T when R is 0), which spreads the R requests evenly over T. Only
// request-count quotas are paced; policies in other units (content-bytes,
// concurrent-requests) are ignored, as are limits that refer to them. A
// request waits for a token in every bucket and for the end of any
// Retry-After block.
//
// All methods take the time as a parameter and are safe for concurrent use;
// time that goes backwards is treated as no time passing.
type Pacer struct {
	mu        sync.Mutex
	buckets   map[string]*bucket
	skip      map[string]bool // policy names whose unit is not requests
	notBefore time.Time
}

type bucket struct {
	rate       float64 // tokens per second; 0 until known
	burst      float64
	tokens     float64
	last       time.Time
	fromPolicy bool
}

// NewPacer returns an empty Pacer, which lets every request through at once
// until it observes a field that says otherwise.
func NewPacer() *Pacer {
	return &Pacer{buckets: map[string]*bucket{}, skip: map[string]bool{}}
}

func (b *bucket) advance(now time.Time) {
	if !now.After(b.last) {
		return
	}
	if b.rate > 0 {
		b.tokens = math.Min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
	}
	b.last = now
}

// Observe feeds the parsed fields of a response received at now into the
// pacer. Nil slices are fine.
func (p *Pacer) Observe(now time.Time, policies []Policy, limits []Limit) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pol := range policies {
		if pol.Unit != "requests" && pol.Unit != "request" && pol.Unit != "" {
			p.skip[pol.Name] = true
			delete(p.buckets, pol.Name)
			continue
		}
		delete(p.skip, pol.Name)
		if pol.Quota <= 0 || pol.Window <= 0 {
			continue // a zero quota cannot be paced; Retry-After covers it
		}
		b := p.buckets[pol.Name]
		q := float64(pol.Quota)
		if b == nil {
			b = &bucket{tokens: q, last: now}
			p.buckets[pol.Name] = b
		}
		b.advance(now)
		b.rate, b.burst, b.fromPolicy = q/pol.Window.Seconds(), q, true
		b.tokens = math.Min(b.tokens, b.burst)
	}
	for _, l := range limits {
		if p.skip[l.Name] {
			continue
		}
		b := p.buckets[l.Name]
		windowed := l.HasWindow && l.Window > 0
		if b == nil {
			if !windowed {
				continue // no rate and no window: nothing to pace with
			}
			b = &bucket{last: now, tokens: math.Inf(1)}
			p.buckets[l.Name] = b
		}
		b.advance(now)
		r := float64(l.Remaining)
		if windowed {
			t := l.Window.Seconds()
			if !b.fromPolicy {
				b.rate = math.Max(r, 1) / t
				b.burst = math.Max(r, 1)
			}
			b.tokens = math.Min(b.tokens, r+1-b.rate*t)
		} else if b.rate > 0 {
			b.tokens = math.Min(b.tokens, r)
		}
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

// Reserve books one request that would go at time at (at least now) and
// reports how long after at it must wait. If that wait exceeds maxWait,
// nothing is booked and ok is false; a negative maxWait means no limit. The
// returned cancel gives the booking back (call it if the request is not sent;
// it is a no-op after a failed Reserve).
func (p *Pacer) Reserve(at time.Time, maxWait time.Duration) (wait time.Duration, cancel func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var w float64
	if p.notBefore.After(at) {
		w = p.notBefore.Sub(at).Seconds()
	}
	for _, b := range p.buckets {
		b.advance(at)
		if b.rate <= 0 || b.tokens >= 1 {
			continue
		}
		w = math.Max(w, (1-b.tokens)/b.rate)
	}
	wait = time.Duration(math.Ceil(w * float64(time.Second)))
	if w*float64(time.Second) >= float64(math.MaxInt64) {
		wait = math.MaxInt64
	}
	if maxWait >= 0 && wait > maxWait {
		return wait, func() {}, false
	}
	taken := make([]*bucket, 0, len(p.buckets))
	for _, b := range p.buckets {
		if b.rate > 0 {
			b.tokens--
			taken = append(taken, b)
		}
	}
	var once sync.Once
	return wait, func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, b := range taken {
				b.tokens = math.Min(b.burst, b.tokens+1)
			}
		})
	}, true
}
