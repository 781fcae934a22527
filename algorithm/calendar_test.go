package algorithm_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

func utcNs(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UnixNano()
}

// calendarLimits are quotas whose periods include a change of
// daylight-saving time, a month end or a shifted start.
var calendarLimits = []portero.Limit{
	portero.PerDay(3).WithZone("Europe/Madrid"),
	portero.PerDay(4).WithZone("America/New_York").WithOffset(6 * time.Hour),
	portero.PerWeek(5).WithZone("Europe/Madrid").WithOffset(6 * 24 * time.Hour),
	portero.PerMonth(3),
	portero.PerMonth(6).WithZone("Europe/Madrid").WithOffset(14*24*time.Hour + 9*time.Hour),
}

// calendarTrace returns n instants around the periods of l near centre:
// many exactly at a boundary or a nanosecond either side, the rest spread
// over the periods; sorted unless back, in which case about one in eight
// steps back by up to a period.
func calendarTrace(r *rand.Rand, l portero.Limit, centre int64, n int, back bool) []int64 {
	var bounds []int64
	s, e := l.PeriodAt(time.Unix(0, centre))
	for range 2 {
		s, _ = l.PeriodAt(s.Add(-time.Nanosecond))
	}
	for range 5 {
		bounds = append(bounds, s.UnixNano())
		s = e
		_, e = l.PeriodAt(s)
	}
	out := make([]int64, n)
	for i := range out {
		b := bounds[1+r.IntN(len(bounds)-2)]
		switch r.IntN(4) {
		case 0:
			out[i] = b + r.Int64N(3) - 1
		case 1:
			out[i] = b + r.Int64N(int64(2*time.Second)) - int64(time.Second)
		default:
			out[i] = bounds[0] + r.Int64N(bounds[len(bounds)-1]-bounds[0])
		}
	}
	slices.Sort(out)
	if back {
		for i := range out {
			if r.IntN(8) == 0 {
				out[i] -= r.Int64N(int64(l.Period.Nominal()))
			}
		}
	}
	return out
}

// A calendar quota's decisions, on random traces around its boundaries:
// RetryAfter is the exact wait (admitted then, refused 1 ns before), it is
// the time to the end of the period counted, which is PeriodLeft; Remaining
// is exactly what passes; ResetAfter is Expiry; and a clock that steps back
// admits nothing that time standing still would not.
func TestCalendarWindowExact(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	centre := utcNs("2024-03-31T12:00:00Z")
	refusals := 0
	for _, l := range calendarLimits {
		for _, back := range []bool{false, true} {
			k := newKeyed(t, portero.FixedWindow, l)
			steady := newKeyed(t, portero.FixedWindow, l)
			latest := map[string]int64{}
			at := calendarTrace(r, l, centre, 400, back)
			for i, now := range at {
				key := []string{"a", "b"}[r.IntN(2)]
				cost := 1 + r.Int64N(l.Count)
				if r.IntN(3) > 0 {
					cost = 1
				}
				d := k.decide(key, now, cost)
				latest[key] = max(latest[key], now)
				if sd := steady.decide(key, latest[key], cost); sd.Allowed != d.Allowed {
					t.Fatalf("%v request %d at %d: allowed %v, with time standing still %v", l, i, now, d.Allowed, sd.Allowed)
				}
				if !d.Quota || d.PeriodLeft <= 0 || d.Limit != l.Count || d.Delay != 0 {
					t.Fatalf("%v request %d: %+v, want Quota, a PeriodLeft, Limit %d", l, i, d, l.Count)
				}
				_, end := l.PeriodAt(time.Unix(0, now))
				if !back && now+int64(d.PeriodLeft) != end.UnixNano() {
					t.Fatalf("%v request %d at %d: PeriodLeft %v, want the %v to the period's end", l, i, now, d.PeriodLeft, time.Duration(end.UnixNano()-now))
				}
				if d.Allowed {
					if d.RetryAfter != 0 || d.ResetAfter != d.PeriodLeft {
						t.Fatalf("%v request %d: allowed %+v, want no RetryAfter and ResetAfter = PeriodLeft", l, i, d)
					}
					continue
				}
				refusals++
				if d.RetryAfter != d.PeriodLeft {
					t.Fatalf("%v request %d: refused %+v, want RetryAfter = PeriodLeft", l, i, d)
				}
				at1 := now + int64(d.RetryAfter)
				if got := k.peek(key, at1, cost); !got.Allowed {
					t.Fatalf("%v request %d: RetryAfter %v, refused then: %+v", l, i, d.RetryAfter, got)
				}
				if got := k.peek(key, at1-1, cost); got.Allowed {
					t.Fatalf("%v request %d: RetryAfter %v, admitted 1 ns earlier", l, i, d.RetryAfter)
				}
			}
			now := at[len(at)-1]
			for _, key := range []string{"a", "b"} {
				p := k.peek(key, now, 1)
				want := p.Remaining
				if p.Allowed {
					want++
				}
				got := int64(0)
				for got <= l.Count && k.decide(key, now, 1).Allowed {
					got++
				}
				if got != want {
					t.Fatalf("%v key %s: peek %+v, but %d passed", l, key, p, got)
				}
			}
		}
	}
	if refusals < 100 {
		t.Fatalf("only %d refusals: the traces do not exercise RetryAfter", refusals)
	}
}

// At Expiry (the end of the period) the state decides like no state, and
// the whole quota passes then but not 1 ns before.
func TestCalendarWindowExpiry(t *testing.T) {
	for _, l := range calendarLimits {
		dec, err := algorithm.New(portero.FixedWindow, l)
		if err != nil {
			t.Fatal(err)
		}
		now := utcNs("2024-03-31T21:59:59Z")
		s, d := dec.Decide(algorithm.State{}, false, now, 1)
		exp := dec.Expiry(s)
		if now+int64(d.ResetAfter) != exp {
			t.Fatalf("%v: now+ResetAfter %d, Expiry %d", l, now+int64(d.ResetAfter), exp)
		}
		if _, dd := dec.Decide(s, true, exp, l.Count); !dd.Allowed {
			t.Errorf("%v: the whole quota refused at Expiry: %+v", l, dd)
		}
		if _, dd := dec.Decide(s, true, exp-1, l.Count); dd.Allowed {
			t.Errorf("%v: the whole quota admitted 1 ns before Expiry", l)
		}
		_, fresh := dec.Decide(algorithm.State{}, false, exp, 1)
		_, old := dec.Decide(s, true, exp, 1)
		if fresh != old {
			t.Errorf("%v: at Expiry the state decides %+v, no state %+v", l, old, fresh)
		}
	}
}

// A client within its rate still spends a day's quota.
// 3 per day in Madrid on the day of the spring change, which has 23 hours.
func TestCalendarWindowDST(t *testing.T) {
	dec, err := algorithm.New(portero.FixedWindow, portero.PerDay(3).WithZone("Europe/Madrid"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dec.(*algorithm.CalendarWindow); !ok {
		t.Fatalf("New(fixed-window, a calendar limit) = %T, want *CalendarWindow", dec)
	}
	var s algorithm.State
	found := false
	for i, st := range []struct {
		at               string
		cost             int64
		allowed          bool
		remaining        int64
		retry, left      time.Duration
		resetAfterWanted time.Duration
	}{
		{"2024-03-30T23:00:00Z", 1, true, 2, 0, 23 * time.Hour, 23 * time.Hour}, // Madrid midnight of a 23 h day
		{"2024-03-31T00:59:59Z", 1, true, 1, 0, 21*time.Hour + time.Second, 21*time.Hour + time.Second},
		{"2024-03-31T01:00:00Z", 2, false, 1, 21 * time.Hour, 21 * time.Hour, 21 * time.Hour}, // 03:00 CEST
		{"2024-03-31T01:00:00Z", 1, true, 0, 0, 21 * time.Hour, 21 * time.Hour},
		{"2024-03-31T21:59:59.999999999Z", 1, false, 0, 1, 1, 1},
		{"2024-03-31T22:00:00Z", 3, true, 0, 0, 24 * time.Hour, 24 * time.Hour},               // 1 April: 24 h
		{"2024-03-31T21:00:00Z", 1, false, 0, 25 * time.Hour, 25 * time.Hour, 25 * time.Hour}, // back into 31 March: 1 April stands
	} {
		next, d := dec.Decide(s, found, utcNs(st.at), st.cost)
		want := portero.Decision{Allowed: st.allowed, Limit: 3, Remaining: st.remaining, RetryAfter: st.retry, ResetAfter: st.resetAfterWanted, Quota: true, PeriodLeft: st.left}
		if d != want {
			t.Errorf("step %d at %s cost %d: %+v, want %+v", i, st.at, st.cost, d, want)
		}
		if d.Allowed {
			s, found = next, true
		}
	}
}

// The period cache is shared by every caller of a Decider: concurrent
// lookups at instants in many periods, in any order, answer what
// PeriodAt does.
func TestCalendarPeriodCache(t *testing.T) {
	l := portero.PerDay(1).WithZone("America/New_York")
	dec, err := algorithm.New(portero.FixedWindow, l)
	if err != nil {
		t.Fatal(err)
	}
	cw := dec.(*algorithm.CalendarWindow)
	base := utcNs("2024-03-08T00:00:00Z")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 2000 {
				now := base + r.Int64N(int64(5*24*time.Hour))
				s, e := cw.Period(now)
				ws, we := l.PeriodAt(time.Unix(0, now))
				if s != ws.UnixNano() || e != we.UnixNano() {
					t.Errorf("Period(%d) = [%d, %d), want [%d, %d)", now, s, e, ws.UnixNano(), we.UnixNano())
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A calendar limit is only for the fixed window; everything else refuses
// it with ErrInvalidLimit.
func TestCalendarNeedsFixedWindow(t *testing.T) {
	l := portero.PerDay(10)
	for _, alg := range portero.Algorithms {
		_, err := algorithm.MaxCost(alg, l)
		if alg == portero.FixedWindow {
			if err != nil {
				t.Errorf("MaxCost(fixed-window, %v) = %v", l, err)
			}
			continue
		}
		if !errors.Is(err, portero.ErrInvalidLimit) {
			t.Errorf("MaxCost(%s, %v) = %v, want ErrInvalidLimit", alg, l, err)
		}
	}
	if _, err := algorithm.NewSlidingLog(l); !errors.Is(err, portero.ErrInvalidLimit) {
		t.Errorf("NewSlidingLog(%v) = %v, want ErrInvalidLimit", l, err)
	}
}
