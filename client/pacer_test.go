package client

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// send calls Take at tm and, while it says wait, again after the wait, as
// the Transport does. It returns when the request went.
func send(p *Pacer, tm time.Time) time.Time {
	for i := 0; i < 1000; i++ {
		w := p.Take(tm)
		if w == 0 {
			return tm
		}
		tm = tm.Add(w)
	}
	panic("pacer never let the request go")
}

func TestPacerEmptyLetsEverythingThrough(t *testing.T) {
	p := NewPacer()
	for i := range 100 {
		if w := p.Take(at(0)); w != 0 {
			t.Fatalf("request %d waits %v on an empty pacer, want 0", i, w)
		}
	}
}

func TestPacerPolicyBucket(t *testing.T) {
	// "p";q=10;w=1: a burst of 10, then one every 100 ms.
	p := NewPacer()
	p.Observe(at(0), []Policy{{Name: "p", Quota: 10, Unit: "requests", Window: time.Second}}, nil)
	for i := range 10 {
		if w := p.Take(at(0)); w != 0 {
			t.Fatalf("burst request %d waits %v, want 0", i, w)
		}
	}
	if w := p.Take(at(0)); w != 100*time.Millisecond {
		t.Errorf("11th request waits %v, want 100ms", w)
	}
	if w := p.Take(at(0)); w != 100*time.Millisecond {
		t.Errorf("a wait books nothing: the next asker also waits %v, want 100ms", w)
	}
	if got := send(p, at(0.1)); got != at(0.1) {
		t.Errorf("at 100 ms the request went at %v, want at once", got.Sub(t0))
	}
	// Ten seconds idle refill only up to the burst.
	n := 0
	for p.Take(at(10)) == 0 {
		n++
	}
	if n != 10 {
		t.Errorf("after idling, %d requests went at once, want the burst of 10", n)
	}
}

func TestPacerBudget(t *testing.T) {
	// "p";r=3;t=3: three now, the fourth only when the 3 s are over.
	p := NewPacer()
	p.Observe(at(0), nil, []Limit{{Name: "p", Remaining: 3, Window: 3 * time.Second, HasWindow: true}})
	for i := range 3 {
		if w := p.Take(at(0.5)); w != 0 {
			t.Fatalf("request %d waits %v, want 0 (r=3)", i+1, w)
		}
		p.Observe(at(0.5), nil, nil) // its response, without fields
	}
	if w := p.Take(at(1)); w != 2*time.Second {
		t.Errorf("4th request at 1 s waits %v, want 2s (until the 3 s window ends)", w)
	}
	if w := p.Take(at(3)); w != 0 {
		t.Errorf("at 3 s the budget is over: wait %v, want 0", w)
	}
	p.Observe(at(3), nil, nil)
	// r=0;t=5: the next request waits the window out; a newer response
	// replaces the budget.
	p.Observe(at(10), nil, []Limit{{Name: "p", Remaining: 0, Window: 5 * time.Second, HasWindow: true}})
	if w := p.Take(at(11)); w != 4*time.Second {
		t.Errorf("after r=0;t=5 at 10 s, a request at 11 s waits %v, want 4s", w)
	}
	p.Observe(at(12), nil, []Limit{{Name: "p", Remaining: 1, Window: time.Second, HasWindow: true}})
	if w := p.Take(at(12)); w != 3*time.Second {
		t.Errorf("a more generous r=1 inside the open window: wait %v, want 3s (it may only lower)", w)
	}
	p.Observe(at(15), nil, []Limit{{Name: "p", Remaining: 1, Window: time.Second, HasWindow: true}})
	if w := p.Take(at(15)); w != 0 {
		t.Errorf("after the window, a new r=1: wait %v, want 0", w)
	}
	// Items without t give no budget.
	q := NewPacer()
	q.Observe(at(0), nil, []Limit{{Name: "p", Remaining: 0}})
	if w := q.Take(at(0)); w != 0 {
		t.Errorf("r=0 without t paced: wait %v, want 0", w)
	}
}

func TestPacerCountsRequestsInFlight(t *testing.T) {
	// Two requests go; the first one's response says r=2;t=1. The second
	// is still in flight and may not be counted in that r yet, so only one
	// more may go.
	p := NewPacer()
	p.Take(at(0))
	p.Take(at(0))
	p.Observe(at(0), nil, []Limit{{Name: "p", Remaining: 2, Window: time.Second, HasWindow: true}})
	if w := p.Take(at(0)); w != 0 {
		t.Errorf("third request waits %v, want 0", w)
	}
	if w := p.Take(at(0)); w != time.Second {
		t.Errorf("fourth request waits %v, want 1s", w)
	}
}

func TestPacerBucketAndBudgetTogether(t *testing.T) {
	// The draft's throttled example: q=10 per second and r=0;t=5 — nothing
	// for 5 s, then the bucket's burst.
	p := NewPacer()
	p.Observe(at(0), []Policy{{Name: "d", Quota: 10, Unit: "requests", Window: time.Second}}, []Limit{{Name: "d", Remaining: 0, Window: 5 * time.Second, HasWindow: true}})
	if got := send(p, at(0)); got != at(5) {
		t.Errorf("request went at %v, want 5s", got.Sub(t0))
	}
}

func TestPacerIgnoresOtherUnits(t *testing.T) {
	p := NewPacer()
	p.Observe(at(0), []Policy{{Name: "bytes", Quota: 10, Unit: "content-bytes", Window: time.Second}}, []Limit{{Name: "bytes", Remaining: 0, Window: time.Hour, HasWindow: true}})
	if w := p.Take(at(0)); w != 0 {
		t.Errorf("a content-bytes limit paced requests: wait %v, want 0", w)
	}
}

func TestPacerBlockAndDelay(t *testing.T) {
	p := NewPacer()
	p.Block(at(0), 2*time.Second)
	p.Block(at(0), time.Second) // earlier holds do not shorten it
	if w := p.Delay(at(0.5)); w != 1500*time.Millisecond {
		t.Errorf("Delay at 0.5 s during a block until 2 s = %v, want 1.5s", w)
	}
	if w := p.Delay(at(3)); w != 0 {
		t.Errorf("Delay after the block = %v, want 0", w)
	}
	if got := send(p, at(0.5)); got != at(2) {
		t.Errorf("request went at %v, want 2s", got.Sub(t0))
	}
	// Delay books nothing.
	q := NewPacer()
	q.Observe(at(0), []Policy{{Name: "p", Quota: 1, Unit: "requests", Window: time.Second}}, nil)
	for range 5 {
		if w := q.Delay(at(0)); w != 0 {
			t.Fatalf("Delay = %v, want 0", w)
		}
	}
	if w := q.Take(at(0)); w != 0 {
		t.Errorf("Take after Delays = %v, want 0", w)
	}
}

func TestPacerTimeBackwards(t *testing.T) {
	p := NewPacer()
	p.Observe(at(10), []Policy{{Name: "p", Quota: 1, Unit: "requests", Window: time.Second}}, nil)
	if w := p.Take(at(10)); w != 0 {
		t.Fatalf("first request waits %v", w)
	}
	// A clock that jumps back must not mint tokens or panic.
	if w := p.Take(at(5)); w < time.Second {
		t.Errorf("wait after the clock went back = %v, want >= 1s", w)
	}
}

// TestPacerCapsWindows: a RateLimit t, a
// RateLimit-Policy w or a Retry-After hold can keep requests back for at
// most DefaultMaxHold (24 h), not the 31 years of t=999999999.
func TestPacerCapsWindows(t *testing.T) {
	const huge = 999999999 * time.Second
	for _, tc := range []struct {
		name string
		feed func(p *Pacer)
	}{
		{"RateLimit t", func(p *Pacer) {
			p.Observe(at(0), nil, []Limit{{Name: "p", Remaining: 0, Window: huge, HasWindow: true}})
		}},
		{"RateLimit-Policy w", func(p *Pacer) {
			p.Observe(at(0), []Policy{{Name: "p", Quota: 1, Unit: "requests", Window: huge}}, nil)
			p.Take(at(0)) // the only token
			p.Observe(at(0), nil, nil)
		}},
		{"Retry-After hold", func(p *Pacer) { p.Block(at(0), huge) }},
	} {
		p := NewPacer()
		tc.feed(p)
		if w := p.Delay(at(0)); w != DefaultMaxHold {
			t.Errorf("%s of 999999999 s: Delay = %v, want the cap %v", tc.name, w, DefaultMaxHold)
		}
		if got := send(p, at(0)); got != t0.Add(DefaultMaxHold) {
			t.Errorf("%s: the request went at %v, want after %v", tc.name, got.Sub(t0), DefaultMaxHold)
		}
	}
	p := NewPacerMaxHold(time.Minute)
	p.Observe(at(0), nil, []Limit{{Name: "p", Remaining: 0, Window: time.Hour, HasWindow: true}})
	if w := p.Delay(at(0)); w != time.Minute {
		t.Errorf("NewPacerMaxHold(1m), t=3600: Delay = %v, want 1m", w)
	}
}

// TestPacerStateIsBounded: however many policy names a server sends, a
// pacer keeps at most maxPolicies of them, and forgets those that no longer
// hold anything back.
func TestPacerStateIsBounded(t *testing.T) {
	p := NewPacer()
	for i := range 10000 {
		name := "p" + itoa(i)
		p.Observe(at(float64(i)/1000), []Policy{{Name: name, Quota: 5, Unit: "requests", Window: time.Second}, {Name: "b" + itoa(i), Quota: 5, Unit: "content-bytes", Window: time.Second}},
			[]Limit{{Name: name, Remaining: 3, Window: time.Second, HasWindow: true}})
	}
	if n := p.size(); n > maxPolicies {
		t.Errorf("after 10000 policy names the pacer keeps %d, want at most %d", n, maxPolicies)
	}
	// A day later, with every bucket full again, every budget's window over
	// and no name seen for MaxHold, nothing is left and the pacer is idle.
	later := at(10).Add(DefaultMaxHold + time.Second)
	p.Take(later)
	p.Observe(later, nil, nil)
	if n, idle := p.size(), p.idle(later); n != 0 || !idle {
		t.Errorf("a day later the pacer keeps %d policies (idle %v), want 0 and idle", n, idle)
	}
	// New names are learnt again once old ones expire.
	p.Observe(later, []Policy{{Name: "fresh", Quota: 1, Unit: "requests", Window: time.Hour}}, nil)
	p.Take(later)
	if w := p.Delay(later); w != time.Hour {
		t.Errorf("a fresh policy after expiry: Delay = %v, want 1h", w)
	}
	if p.idle(later) {
		t.Error("idle with an empty bucket")
	}
}

func TestPacerIdle(t *testing.T) {
	p := NewPacer()
	if !p.idle(at(0)) {
		t.Error("a new pacer is not idle")
	}
	p.Take(at(0))
	if p.idle(at(0)) {
		t.Error("idle with a request in flight")
	}
	p.Observe(at(0), []Policy{{Name: "p", Quota: 2, Unit: "requests", Window: 2 * time.Second}}, []Limit{{Name: "p", Remaining: 1, Window: 3 * time.Second, HasWindow: true}})
	p.Take(at(0))
	p.Observe(at(0), nil, nil)
	for _, tc := range []struct {
		s    float64
		idle bool
	}{{0, false}, {2.5, false}, {3, true}} { // bucket full at 1 s, budget open until 3 s
		if got := p.idle(at(tc.s)); got != tc.idle {
			t.Errorf("idle at %vs = %v, want %v", tc.s, got, tc.idle)
		}
	}
	p.Block(at(3), time.Second)
	if p.idle(at(3.5)) || !p.idle(at(4)) {
		t.Errorf("idle during a hold until 4 s = %v, after it = %v; want false, true", p.idle(at(3.5)), p.idle(at(4)))
	}
}
