package algorithm

import (
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
)

// CalendarWindow is the fixed window on the calendar: a quota of L per day,
// week or month (portero.Limit.Period) in a time zone, with the periods
// portero.Limit.PeriodAt defines. An instant exactly at a boundary belongs
// to the period that starts there. It admits while count + cost ≤ L, then
// counts; a refusal's RetryAfter is the time to the end of the period. New
// returns it for the fixed-window algorithm with a calendar limit; the
// fixed window over a Window is the same rule on epoch-aligned windows (so
// 24 h fixed windows are UTC days).
//
// State: A = the end of the period counted (Unix ns), B = the count. A
// period is known by its end, as in the Redis script, which needs nothing
// but the boundaries around its own clock. A clock that went back into an
// earlier period stays in the stored one, as the fixed window does.
//
// Decisions have Quota set and PeriodLeft, the time to the end of the
// period, so that a door can tell a spent quota from a rate refusal and
// announce when the quota comes back.
type CalendarWindow struct {
	limit portero.Limit
	count int64
	// last caches the period of the latest lookup: calendar arithmetic in a
	// time zone costs far more than a decision, and periods last days.
	last atomic.Pointer[span]
}

type span struct{ start, end int64 }

func newCalendarWindow(l portero.Limit) *CalendarWindow {
	return &CalendarWindow{limit: l, count: l.Count}
}

// Period returns the period [start, end) (Unix ns) that contains now.
func (a *CalendarWindow) Period(now int64) (start, end int64) {
	if s := a.last.Load(); s != nil && now >= s.start && now < s.end {
		return s.start, s.end
	}
	st, en := a.limit.PeriodAt(time.Unix(0, now))
	s := &span{st.UnixNano(), en.UnixNano()}
	a.last.Store(s)
	return s.start, s.end
}

// Decide implements Decider.
func (a *CalendarWindow) Decide(s State, found bool, now, cost int64) (State, portero.Decision) {
	if _, end := a.Period(now); !found || end > s.A {
		s = State{A: end}
	}
	s, d := countIn(s, s.A, a.count, now, cost)
	d.Quota = true
	d.PeriodLeft = dur(s.A - now)
	return s, d
}

// Expiry implements Decider: the end of the stored period.
func (a *CalendarWindow) Expiry(s State) int64 { return s.A }

// MaxCost implements Decider: L.
func (a *CalendarWindow) MaxCost() int64 { return a.count }

// Limit implements Decider.
func (a *CalendarWindow) Limit() portero.Limit { return a.limit }
