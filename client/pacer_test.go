package client

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// book reserves one request at each time and returns the waits.
func book(t *testing.T, p *Pacer, times ...time.Time) []time.Duration {
	t.Helper()
	var ws []time.Duration
	for _, tm := range times {
		w, _, ok := p.Reserve(tm, -1)
		if !ok {
			t.Fatalf("Reserve(%v, no limit) not ok", tm)
		}
		ws = append(ws, w)
	}
	return ws
}

func TestPacerEmptyLetsEverythingThrough(t *testing.T) {
	p := NewPacer()
	for i, w := range book(t, p, at(0), at(0), at(0)) {
		if w != 0 {
			t.Errorf("request %d waits %v on an empty pacer, want 0", i, w)
		}
	}
}

func TestPacerPolicyRate(t *testing.T) {
	// "p";q=10;w=1 and "p";r=0;t=1: nothing for 1 s, then 10 per second.
	p := NewPacer()
	p.Observe(at(0), []Policy{{Name: "p", Quota: 10, Unit: "requests", Window: time.Second}}, []Limit{{Name: "p", Remaining: 0, Window: time.Second, HasWindow: true}})
	ws := book(t, p, at(0), at(0), at(0))
	want := []time.Duration{time.Second, 1100 * time.Millisecond, 1200 * time.Millisecond}
	for i := range want {
		if d := ws[i] - want[i]; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("wait %d = %v, want %v", i, ws[i], want[i])
		}
	}
}

func TestPacerRemainingWithinWindow(t *testing.T) {
	// r=3;t=3 with policy q=30;w=30 (1/s): one now, at most 3 before 3 s.
	p := NewPacer()
	p.Observe(at(0), []Policy{{Name: "p", Quota: 30, Unit: "requests", Window: 30 * time.Second}}, []Limit{{Name: "p", Remaining: 3, Window: 3 * time.Second, HasWindow: true}})
	ws := book(t, p, at(0), at(0), at(0), at(0))
	sent := 0
	for _, w := range ws {
		if w < 3*time.Second {
			sent++
		}
	}
	if sent != 3 {
		t.Errorf("waits %v: %d requests before t=3s, want exactly r=3", ws, sent)
	}
	if ws[0] != 0 {
		t.Errorf("first wait = %v, want 0", ws[0])
	}
}

func TestPacerLimitWithoutPolicy(t *testing.T) {
	// r=4;t=2 and no policy: 4 requests evenly over 2 s (0, 0.5, 1, 1.5).
	p := NewPacer()
	p.Observe(at(0), nil, []Limit{{Name: "x", Remaining: 4, Window: 2 * time.Second, HasWindow: true}})
	ws := book(t, p, at(0), at(0), at(0), at(0), at(0))
	for i, w := range ws {
		want := time.Duration(i) * 500 * time.Millisecond
		if d := w - want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("wait %d = %v, want %v", i, w, want)
		}
	}
	// r=0;t=5 and no policy: the next request waits the whole window.
	q := NewPacer()
	q.Observe(at(0), nil, []Limit{{Name: "x", Remaining: 0, Window: 5 * time.Second, HasWindow: true}})
	if w := book(t, q, at(1))[0]; w != 4*time.Second {
		t.Errorf("after r=0;t=5 at 0 s, a request at 1 s waits %v, want 4s", w)
	}
}

func TestPacerOnlyLowers(t *testing.T) {
	p := NewPacer()
	pol := []Policy{{Name: "p", Quota: 2, Unit: "requests", Window: time.Second}}
	p.Observe(at(0), pol, []Limit{{Name: "p", Remaining: 0, Window: time.Second, HasWindow: true}})
	p.Observe(at(0), pol, []Limit{{Name: "p", Remaining: 1000, Window: time.Second, HasWindow: true}})
	if w := book(t, p, at(0))[0]; w < time.Second {
		t.Errorf("a stale generous r raised the tokens: wait %v, want >= 1s", w)
	}
}

func TestPacerIgnoresOtherUnits(t *testing.T) {
	p := NewPacer()
	p.Observe(at(0), []Policy{{Name: "bytes", Quota: 10, Unit: "content-bytes", Window: time.Second}}, []Limit{{Name: "bytes", Remaining: 0, Window: time.Hour, HasWindow: true}})
	if w := book(t, p, at(0))[0]; w != 0 {
		t.Errorf("a content-bytes limit paced requests: wait %v, want 0", w)
	}
}

func TestPacerBlockAndMaxWait(t *testing.T) {
	p := NewPacer()
	p.Block(at(2))
	p.Block(at(1)) // earlier blocks do not shorten it
	if w, _, ok := p.Reserve(at(0), time.Second); ok {
		t.Errorf("Reserve(maxWait 1s) during a 2 s block = %v, ok, want not ok", w)
	}
	if w := book(t, p, at(0.5))[0]; w != 1500*time.Millisecond {
		t.Errorf("Reserve at 0.5 s during a block until 2 s waits %v, want 1.5s", w)
	}
}

func TestPacerCancelGivesTokenBack(t *testing.T) {
	p := NewPacer()
	p.Observe(at(0), []Policy{{Name: "p", Quota: 1, Unit: "requests", Window: time.Second}}, nil)
	_, cancel, _ := p.Reserve(at(0), -1)
	cancel()
	cancel() // twice is harmless
	if w := book(t, p, at(0))[0]; w != 0 {
		t.Errorf("after cancel, wait = %v, want 0", w)
	}
	if w := book(t, p, at(0))[0]; w != time.Second {
		t.Errorf("second request in the same second waits %v, want 1s", w)
	}
}

func TestPacerTimeBackwards(t *testing.T) {
	p := NewPacer()
	p.Observe(at(10), []Policy{{Name: "p", Quota: 1, Unit: "requests", Window: time.Second}}, nil)
	book(t, p, at(10))
	// A clock that jumps back must not mint tokens or panic.
	if w := book(t, p, at(5))[0]; w < time.Second {
		t.Errorf("wait after the clock went back = %v, want >= 1s", w)
	}
}
