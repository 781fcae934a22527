package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	_ "time/tzdata" // the suite's zones, on any machine

	"github.com/portero-rl/portero"
)

// at returns the offset from Base of an RFC 3339 instant, for tables that
// name the calendar.
func at(s string) time.Duration {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.Sub(Base)
}

const hour = time.Hour

// q is a calendar quota: a fixed window on the calendar.
func q(name string, l portero.Limit) portero.Rule {
	return portero.Rule{Name: name, Algorithm: portero.FixedWindow, Limit: l}
}

// CalendarTables returns the step tables of calendar quotas (the fixed
// window on the calendar, portero.Limit.Period): days of 23 and 25 hours
// across the changes of daylight-saving time, a month end and a leap day,
// weeks and months that start at an offset, and time that goes back into
// an earlier period, and starts that a change of daylight-saving time
// skips (the period starts at the change) or repeats (at the first pass).
// Every boundary is worked by hand from the zone's rules: Europe/Madrid
// changes at 01:00 UTC on 31 March and 27 October 2024, America/New_York
// at 07:00 UTC on 10 March and 06:00 UTC on 3 November 2024,
// America/Santiago at 04:00 UTC on 6 September 2026 (00:00 −04 → 01:00 −03).
func CalendarTables() []Table {
	madrid := "Europe/Madrid"
	return []Table{
		{
			Name: "calendar day in Madrid: 23 hours at the spring change, a boundary belongs to the new day",
			Rule: q("quota-day", portero.PerDay(3).WithZone(madrid)),
			Steps: []Step{
				{At: at("2024-03-30T22:59:59.999999Z"), Cost: 3, Allowed: true, Remaining: 0, ResetAfter: 1 * time.Microsecond, CheckReset: true, PeriodLeft: time.Microsecond, Note: "the last µs of 30 March, Madrid time"},
				{At: at("2024-03-30T22:59:59.999999Z"), Remaining: 0, RetryAfter: time.Microsecond, PeriodLeft: time.Microsecond, Note: "spent: back at Madrid midnight"},
				{At: at("2024-03-30T23:00:00Z"), Allowed: true, Remaining: 2, ResetAfter: 23 * hour, CheckReset: true, PeriodLeft: 23 * hour, Note: "00:00 CET: the 23-hour day"},
				{At: at("2024-03-31T01:00:00Z"), Cost: 2, Allowed: true, Remaining: 0, PeriodLeft: 21 * hour, Note: "03:00 CEST, just after the change"},
				{At: at("2024-03-31T21:59:59.999999Z"), Remaining: 0, RetryAfter: time.Microsecond, PeriodLeft: time.Microsecond},
				{At: at("2024-03-31T22:00:00Z"), Allowed: true, Remaining: 2, ResetAfter: 24 * hour, CheckReset: true, PeriodLeft: 24 * hour, Note: "1 April, 00:00 CEST"},
				{At: at("2024-03-31T21:00:00Z"), Allowed: true, Remaining: 1, ResetAfter: 25 * hour, CheckReset: true, PeriodLeft: 25 * hour, Note: "time went back into 31 March: 1 April stands"},
				{At: at("2024-03-31T12:00:00Z"), Key: "other", Allowed: true, Remaining: 2, PeriodLeft: 10 * hour, Note: "keys are independent"},
			},
		},
		{
			Name: "calendar day in Madrid: 25 hours at the autumn change",
			Rule: q("quota-day", portero.PerDay(2).WithZone(madrid)),
			Steps: []Step{
				{At: at("2024-10-26T22:00:00Z"), Allowed: true, Remaining: 1, PeriodLeft: 25 * hour, Note: "00:00 CEST on 27 October"},
				{At: at("2024-10-27T01:30:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 21*hour + 30*time.Minute, Note: "02:30 CET, the second pass of the repeated hour"},
				{At: at("2024-10-27T22:59:59.999999Z"), Remaining: 0, RetryAfter: time.Microsecond, PeriodLeft: time.Microsecond},
				{At: at("2024-10-27T23:00:00Z"), Cost: 2, Allowed: true, Remaining: 0, PeriodLeft: 24 * hour, Note: "00:00 CET on 28 October"},
			},
		},
		{
			Name: "calendar month in UTC: a month end and a leap February",
			Rule: q("quota-month", portero.PerMonth(2)),
			Steps: []Step{
				{At: at("2024-01-31T23:59:59.999999Z"), Cost: 2, Allowed: true, Remaining: 0, PeriodLeft: time.Microsecond},
				{At: at("2024-02-01T00:00:00Z"), Allowed: true, Remaining: 1, ResetAfter: 29 * 24 * hour, CheckReset: true, PeriodLeft: 29 * 24 * hour, Note: "February 2024 has 29 days"},
				{At: at("2024-02-29T12:00:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 12 * hour},
				{At: at("2024-02-29T23:59:59Z"), Remaining: 0, RetryAfter: time.Second, PeriodLeft: time.Second},
				{At: at("2024-03-01T00:00:00Z"), Cost: 2, Allowed: true, Remaining: 0, PeriodLeft: 31 * 24 * hour},
			},
		},
		{
			Name: "months from the 15th at 09:00 in Madrid: 31 days less the spring hour",
			Rule: q("quota-month15", portero.PerMonth(1).WithZone(madrid).WithOffset(14*24*hour+9*hour)),
			Steps: []Step{
				{At: at("2024-03-15T07:59:59Z"), Allowed: true, Remaining: 0, PeriodLeft: time.Second, Note: "08:59:59 CET on the 15th: February's period"},
				{At: at("2024-03-15T08:00:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 743 * hour, Note: "09:00 CET on 15 March to 09:00 CEST on 15 April"},
				{At: at("2024-04-15T06:59:59.999999Z"), Remaining: 0, RetryAfter: time.Microsecond, PeriodLeft: time.Microsecond},
				{At: at("2024-04-15T07:00:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 30 * 24 * hour},
			},
		},
		{
			Name: "weeks from Sunday in New York: 7 days less the spring hour",
			Rule: q("quota-week", portero.PerWeek(2).WithZone("America/New_York").WithOffset(6*24*hour)),
			Steps: []Step{
				{At: at("2024-03-10T04:59:59Z"), Allowed: true, Remaining: 1, PeriodLeft: time.Second, Note: "Saturday 23:59:59 EST"},
				{At: at("2024-03-10T05:00:00Z"), Cost: 2, Allowed: true, Remaining: 0, PeriodLeft: 167 * hour, Note: "Sunday 00:00 EST to Sunday 00:00 EDT"},
				{At: at("2024-03-10T07:00:00Z"), Remaining: 0, RetryAfter: 165 * hour, PeriodLeft: 165 * hour, Note: "03:00 EDT"},
				{At: at("2024-03-17T04:00:00Z"), Allowed: true, Remaining: 1, PeriodLeft: 168 * hour},
			},
		},
		{
			Name: "calendar day in Santiago: a skipped midnight starts the day at the change, not an hour early",
			Rule: q("quota-day", portero.PerDay(1).WithZone("America/Santiago")),
			Steps: []Step{
				{At: at("2026-09-05T12:00:00Z"), Allowed: true, Remaining: 0, ResetAfter: 16 * hour, CheckReset: true, PeriodLeft: 16 * hour, Note: "08:00 −04 on 5 September, a day that ends at the change"},
				{At: at("2026-09-06T03:30:00Z"), Remaining: 0, RetryAfter: 30 * time.Minute, PeriodLeft: 30 * time.Minute, Note: "23:30 −04: still the 5th"},
				{At: at("2026-09-06T04:00:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 23 * hour, Note: "01:00 −03, the first instant of the 6th: 23 hours"},
				{At: at("2026-09-07T02:59:59.999999Z"), Remaining: 0, RetryAfter: time.Microsecond, PeriodLeft: time.Microsecond},
			},
		},
		{
			Name: "days from 02:30 in New York: the skipped 02:30 of 10 March starts the day at 03:00 EDT",
			Rule: q("quota-day230", portero.PerDay(1).WithZone("America/New_York").WithOffset(150*time.Minute)),
			Steps: []Step{
				{At: at("2024-03-10T06:45:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 15 * time.Minute, Note: "01:45 EST: the day of 9 March"},
				{At: at("2024-03-10T06:59:59Z"), Remaining: 0, RetryAfter: time.Second, PeriodLeft: time.Second},
				{At: at("2024-03-10T07:00:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 23*hour + 30*time.Minute, Note: "03:00 EDT to 02:30 EDT on the 11th"},
			},
		},
		{
			Name: "days from 02:30 in Madrid: the skipped 02:30 of 31 March starts the day at 03:00 CEST",
			Rule: q("quota-day230", portero.PerDay(1).WithZone(madrid).WithOffset(150*time.Minute)),
			Steps: []Step{
				{At: at("2024-03-31T00:59:59Z"), Allowed: true, Remaining: 0, PeriodLeft: time.Second, Note: "01:59:59 CET: the day of 30 March"},
				{At: at("2024-03-31T01:00:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 23*hour + 30*time.Minute, Note: "03:00 CEST to 02:30 CEST on 1 April"},
				{At: at("2024-03-31T01:15:00Z"), Remaining: 0, RetryAfter: 23*hour + 15*time.Minute, PeriodLeft: 23*hour + 15*time.Minute},
			},
		},
		{
			Name: "days from 02:30 in Madrid: the first 02:30 of 27 October starts the day, the repeated one nothing",
			Rule: q("quota-day230", portero.PerDay(1).WithZone(madrid).WithOffset(150*time.Minute)),
			Steps: []Step{
				{At: at("2024-10-27T00:29:59Z"), Allowed: true, Remaining: 0, PeriodLeft: time.Second, Note: "02:29:59 CEST: the day of 26 October"},
				{At: at("2024-10-27T00:30:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 25 * hour, Note: "02:30 CEST, the first pass: 25 hours to 02:30 CET on the 28th"},
				{At: at("2024-10-27T01:30:00Z"), Remaining: 0, RetryAfter: 24 * hour, PeriodLeft: 24 * hour, Note: "02:30 CET, the second pass"},
			},
		},
		{
			Name: "days from 01:30 in New York: the first 01:30 of 3 November starts the day, the repeated one nothing",
			Rule: q("quota-day130", portero.PerDay(1).WithZone("America/New_York").WithOffset(90*time.Minute)),
			Steps: []Step{
				{At: at("2024-11-03T05:29:59Z"), Allowed: true, Remaining: 0, PeriodLeft: time.Second, Note: "01:29:59 EDT: the day of 2 November"},
				{At: at("2024-11-03T05:30:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 25 * hour, Note: "01:30 EDT, the first pass: 25 hours to 01:30 EST on the 4th"},
				{At: at("2024-11-03T06:30:00Z"), Remaining: 0, RetryAfter: 24 * hour, PeriodLeft: 24 * hour, Note: "01:30 EST, the second pass"},
			},
		},
		{
			Name: "days from 06:00 in Madrid: the shifted day of the spring change has 23 hours",
			Rule: q("quota-day6", portero.PerDay(1).WithZone(madrid).WithOffset(6*hour)),
			Steps: []Step{
				{At: at("2024-03-30T05:00:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 23 * hour, Note: "06:00 CET on 30 March to 06:00 CEST on 31 March"},
				{At: at("2024-03-31T03:59:59.999999Z"), Remaining: 0, RetryAfter: time.Microsecond, PeriodLeft: time.Microsecond},
				{At: at("2024-03-31T04:00:00Z"), Allowed: true, Remaining: 0, PeriodLeft: 24 * hour},
			},
		},
	}
}

// CalendarRules returns the calendar quotas of the random calendar traces:
// a day across Madrid's spring change, weeks from Sunday in New York, UTC
// months and months from the 15th in Madrid.
func CalendarRules() []portero.Rule {
	return []portero.Rule{
		q("q-day", portero.PerDay(3).WithZone("Europe/Madrid")),
		q("q-week", portero.PerWeek(4).WithZone("America/New_York").WithOffset(6*24*time.Hour)),
		q("q-month", portero.PerMonth(5)),
		q("q-month15", portero.PerMonth(2).WithZone("Europe/Madrid").WithOffset(14*24*time.Hour+9*time.Hour)),
	}
}

// CalendarTrace returns about n seeded random calls over rules, clustered
// around the period boundaries of the calendar rules near the end of
// February and of March 2024: for each boundary, calls from a second before
// it to a few seconds after, one exactly at it and one a microsecond before.
// Hits, keys and costs are drawn as in RandomTrace. With back, about one
// call in twenty steps back by up to two seconds, often across the
// boundary it just passed. Instants are whole microseconds after Base.
func CalendarTrace(seed uint64, rules []portero.Rule, n int, back bool) []Trace {
	r := rand.New(rand.NewPCG(seed, seed^0x51ed27d1c9a3f4b5))
	var anchors []time.Duration
	for _, rule := range rules {
		if !rule.Limit.IsCalendar() {
			continue
		}
		for _, c := range []string{"2024-02-29T12:00:00Z", "2024-03-31T12:00:00Z"} {
			s, e := rule.Limit.PeriodAt(Base.Add(at(c)))
			prev, _ := rule.Limit.PeriodAt(s.Add(-time.Nanosecond))
			for _, b := range []time.Time{prev, s, e} {
				anchors = append(anchors, b.Sub(Base))
			}
		}
	}
	slices.Sort(anchors)
	anchors = slices.Compact(anchors)
	keys := []string{"alice", "192.0.2.1"}
	per := max(4, n/max(1, len(anchors)))
	var out []Trace
	for _, a := range anchors {
		t := a - time.Second
		for i := range per {
			switch i {
			case per / 3:
				t = a - time.Microsecond
			case per/3 + 1:
				t = a
			default:
				t += time.Duration(r.IntN(150_000)) * time.Microsecond
			}
			callAt := t
			if back && r.IntN(20) == 0 {
				callAt -= time.Duration(r.IntN(2_000_000)) * time.Microsecond
			}
			out = append(out, Trace{At: callAt, Hits: randomHits(r, rules, keys)})
		}
	}
	return out
}

// runCalendar checks calendar quotas beyond the step tables: random traces
// around their boundaries against Reference (with a token bucket in the
// same calls), all-or-nothing between a quota and a rate, and bad quotas.
func runCalendar(t *testing.T, newStore func(t *testing.T) portero.Store) {
	for _, back := range []bool{false, true} {
		name := "random"
		if back {
			name += "/time-back"
		}
		t.Run(name, func(t *testing.T) {
			rules := append(CalendarRules(), portero.Rule{Name: "rate", Algorithm: portero.TokenBucket, Limit: portero.Limit{Count: 5, Window: time.Second}})
			CompareTrace(t, newStore(t), NewReference(), CalendarTrace(41, rules, 1500, back))
		})
	}
	t.Run("all-or-nothing", func(t *testing.T) {
		quota := portero.Rule{Name: "quota", Algorithm: portero.FixedWindow, Limit: portero.PerDay(10).WithZone("Europe/Madrid")}
		rate := portero.Rule{Name: "rate", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 1, Window: time.Hour}}
		// A request the rate refuses spends no quota ...
		allOrNothing(t, newStore(t), quota, rate)
		// ... and one the quota refuses spends no rate.
		wide := portero.Rule{Name: "wide", Algorithm: portero.TokenBucket, Limit: portero.Limit{Count: 10, Window: time.Minute}}
		allOrNothing(t, newStore(t), wide, portero.Rule{Name: "tight", Algorithm: portero.FixedWindow, Limit: portero.PerMonth(1)})
	})
	t.Run("errors", func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		good := portero.Rule{Name: "quota", Algorithm: portero.FixedWindow, Limit: portero.PerDay(5)}
		for _, c := range []struct {
			name string
			hit  portero.Hit
			want error
		}{
			{"a quota under sliding-counter", portero.Hit{Rule: portero.Rule{Name: "q", Algorithm: portero.SlidingCounter, Limit: good.Limit}, Key: "k", Cost: 1}, portero.ErrInvalidLimit},
			{"a quota under token-bucket", portero.Hit{Rule: portero.Rule{Name: "q", Algorithm: portero.TokenBucket, Limit: good.Limit}, Key: "k", Cost: 1}, portero.ErrInvalidLimit},
			{"an unknown zone", portero.Hit{Rule: portero.Rule{Name: "q", Algorithm: portero.FixedWindow, Limit: good.Limit.WithZone("Mars/Olympus")}, Key: "k", Cost: 1}, portero.ErrInvalidLimit},
			{"an offset of a day", portero.Hit{Rule: portero.Rule{Name: "q", Algorithm: portero.FixedWindow, Limit: good.Limit.WithOffset(24 * time.Hour)}, Key: "k", Cost: 1}, portero.ErrInvalidLimit},
			{"a cost above the quota", portero.Hit{Rule: good, Key: "k", Cost: 6}, portero.ErrCostExceedsLimit},
		} {
			if ds, err := s.AllowAll(ctx, Base, []portero.Hit{c.hit}); !errors.Is(err, c.want) {
				t.Errorf("%s: AllowAll = %v, %v; want an error wrapping %q", c.name, ds, err, c.want)
			}
		}
		ds, err := s.AllowAll(ctx, Base, []portero.Hit{{Rule: good, Key: "k", Cost: 5}})
		if err != nil || len(ds) != 1 || !ds[0].Allowed || !ds[0].Quota {
			t.Errorf("the whole quota after failed calls = %+v, %v; want allowed, a quota's decision", ds, err)
		}
	})
}
