package redisstore

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
)

// calendarAlg names the script function of a calendar quota (a fixed
// window with a portero.Limit.Period): lua/fixed_window_calendar.lua. It is
// what ARGV carries and what picks the scripts for such a rule; the rule
// itself stays fixed-window.
const calendarAlg portero.Algorithm = "fixed-window-calendar"

// calendar gives a calendar rule's script its parameters for an instant:
// L and two consecutive periods around it. The script cannot read a time
// zone, so Go computes the boundaries with its own clock (the caller's
// instant with CallerClock, time.Now with ServerClock) and the script picks
// the period Redis's instant falls in. The two periods sent are those
// nearest that clock: the current one and the one before it in the first
// half of the current period, the current one and the next in the second
// half. So Redis may be up to half a period (eleven and a half hours for a
// day) ahead or behind and still count in the right period, exactly at the
// boundary. The arguments are cached for the half period they serve.
type calendar struct {
	limit portero.Limit
	last  atomic.Pointer[calendarArgs]
}

type calendarArgs struct {
	from, until int64 // Unix ns: the instants these arguments serve
	argv        [3]string
}

// args returns the script parameters p1, p2, p3 for instant now.
func (c *calendar) args(now time.Time) *[3]string {
	ns := now.UnixNano()
	if a := c.last.Load(); a != nil && ns >= a.from && ns < a.until {
		return &a.argv
	}
	st, en := c.limit.PeriodAt(now)
	mid := st.Add(en.Sub(st) / 2)
	a := &calendarArgs{}
	var x0, x1, x2 time.Time
	if now.Before(mid) {
		prev, _ := c.limit.PeriodAt(st.Add(-time.Nanosecond))
		x0, x1, x2 = prev, st, en
		a.from, a.until = st.UnixNano(), mid.UnixNano()
	} else {
		_, next := c.limit.PeriodAt(en)
		x0, x1, x2 = st, en, next
		a.from, a.until = mid.UnixNano(), en.UnixNano()
	}
	spans := (x1.Unix() - x0.Unix()) + (x2.Unix()-x1.Unix())<<22
	a.argv = [3]string{strconv.FormatInt(c.limit.Count, 10), strconv.FormatInt(x0.Unix(), 10), strconv.FormatInt(spans, 10)}
	c.last.Store(a)
	return &a.argv
}

// argv returns the script parameters of hit rule c at instant now (the
// caller's): the rule's fixed ones, or a calendar rule's for the store's
// clock.
func (s *Store) argv(c *compiled, now time.Time) *[3]string {
	if c.cal == nil {
		return &c.args
	}
	if s.cfg.Clock == ServerClock {
		now = time.Now()
	}
	return c.cal.args(now)
}

// decision is the Decision of one hit of rule c from the five integers a
// script returns for it: allowed, remaining, retry-after, reset-after and
// delay (ns). A calendar quota returns the time left in its period where
// the others return the delay; a refusal's is its retry-after, since the
// one-hit and batch drivers return no delay for a refusal.
func (c *compiled) decision(allowed bool, rem, retry, reset, delay int64) portero.Decision {
	d := portero.Decision{
		Allowed:    allowed,
		Limit:      c.limit,
		Remaining:  max(rem, 0), // a settled charge can pass the limit (Adjust)
		RetryAfter: time.Duration(retry),
		ResetAfter: time.Duration(reset),
		Delay:      time.Duration(delay),
	}
	if c.cal != nil {
		d.Delay, d.Quota, d.PeriodLeft = 0, true, time.Duration(delay)
		if !allowed {
			d.PeriodLeft = d.RetryAfter
		}
	}
	return d
}
