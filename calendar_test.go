package portero_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, also where the system has no database

	"github.com/portero-rl/portero"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// PeriodAt across changes of daylight-saving time (23, 24.5 and 25 hour
// days), month ends, leap days, year ends, weeks and offsets. Each expected
// boundary is local midnight (or the shifted start) written in UTC by hand.
func TestPeriodAt(t *testing.T) {
	tests := []struct {
		name       string
		l          portero.Limit
		at         string
		start, end string
	}{
		{"UTC leap day", portero.PerDay(1), "2024-02-29T12:00:00Z", "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"a boundary belongs to the day it starts", portero.PerDay(1), "2024-03-01T00:00:00Z", "2024-03-01T00:00:00Z", "2024-03-02T00:00:00Z"},
		{"the last nanosecond of a day", portero.PerDay(1), "2024-02-29T23:59:59.999999999Z", "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z"},
		// Madrid: 2024-03-31 02:00 CET → 03:00 CEST (01:00 UTC): a 23 h day.
		{"Madrid spring day is 23 h", portero.PerDay(1).WithZone("Europe/Madrid"), "2024-03-31T12:00:00Z", "2024-03-30T23:00:00Z", "2024-03-31T22:00:00Z"},
		{"Madrid day after the change", portero.PerDay(1).WithZone("Europe/Madrid"), "2024-03-31T22:00:00Z", "2024-03-31T22:00:00Z", "2024-04-01T22:00:00Z"},
		{"Madrid last ns of the 23 h day", portero.PerDay(1).WithZone("Europe/Madrid"), "2024-03-31T21:59:59.999999999Z", "2024-03-30T23:00:00Z", "2024-03-31T22:00:00Z"},
		// Madrid: 2024-10-27 03:00 CEST → 02:00 CET (01:00 UTC): a 25 h day.
		{"Madrid autumn day is 25 h", portero.PerDay(1).WithZone("Europe/Madrid"), "2024-10-27T12:00:00Z", "2024-10-26T22:00:00Z", "2024-10-27T23:00:00Z"},
		{"Madrid repeated hour", portero.PerDay(1).WithZone("Europe/Madrid"), "2024-10-27T01:30:00Z", "2024-10-26T22:00:00Z", "2024-10-27T23:00:00Z"},
		// Days from 06:00: 06:00 CET on the 30th (05:00 UTC) to 06:00 CEST on the 31st (04:00 UTC).
		{"Madrid days from 06:00 across spring", portero.PerDay(1).WithZone("Europe/Madrid").WithOffset(6 * time.Hour), "2024-03-31T03:00:00Z", "2024-03-30T05:00:00Z", "2024-03-31T04:00:00Z"},
		// Lord Howe: 2024-04-07 02:00 +11 → 01:30 +10:30: a 24.5 h day.
		{"Lord Howe half-hour change", portero.PerDay(1).WithZone("Australia/Lord_Howe"), "2024-04-07T05:00:00Z", "2024-04-06T13:00:00Z", "2024-04-07T13:30:00Z"},
		{"ISO week from Monday", portero.PerWeek(1), "2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z"},
		{"ISO week, Sunday", portero.PerWeek(1), "2024-01-07T23:00:00Z", "2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z"},
		{"weeks from Sunday (offset 6d)", portero.PerWeek(1).WithOffset(6 * 24 * time.Hour), "2024-01-01T00:00:00Z", "2023-12-31T00:00:00Z", "2024-01-07T00:00:00Z"},
		// New York: 2024-03-10 02:00 EST → 03:00 EDT. Monday 4 March 00:00 EST
		// is 05:00 UTC; Monday 11 March 00:00 EDT is 04:00 UTC.
		{"New York week of the spring change is 7 d − 1 h", portero.PerWeek(1).WithZone("America/New_York"), "2024-03-10T12:00:00Z", "2024-03-04T05:00:00Z", "2024-03-11T04:00:00Z"},
		{"February of a leap year", portero.PerMonth(1), "2024-02-10T00:00:00Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"year end", portero.PerMonth(1), "2023-12-31T23:59:59Z", "2023-12-01T00:00:00Z", "2024-01-01T00:00:00Z"},
		{"months from the 15th", portero.PerMonth(1).WithOffset(14 * 24 * time.Hour), "2024-02-10T00:00:00Z", "2024-01-15T00:00:00Z", "2024-02-15T00:00:00Z"},
		{"months from the 1st at 09:00", portero.PerMonth(1).WithOffset(9 * time.Hour), "2024-03-01T08:00:00Z", "2024-02-01T09:00:00Z", "2024-03-01T09:00:00Z"},
		// Madrid's March 2024 ends on the day of the spring change: 31 d − 1 h.
		{"Madrid March ends after the change", portero.PerMonth(1).WithZone("Europe/Madrid"), "2024-03-31T21:00:00Z", "2024-02-29T23:00:00Z", "2024-03-31T22:00:00Z"},
		{"Madrid April starts at 22:00 UTC", portero.PerMonth(1).WithZone("Europe/Madrid"), "2024-03-31T22:00:00Z", "2024-03-31T22:00:00Z", "2024-04-30T22:00:00Z"},
		// A start that a spring change skips is the change: the first
		// instant whose local time is at or after it. Santiago: 2026-09-06
		// 00:00 −04 (04:00 UTC) → 01:00 −03, so 6 September has no
		// midnight and starts at 04:00 UTC, not an hour early at 23:00 −04.
		{"Santiago: the day before a skipped midnight", portero.PerDay(1).WithZone("America/Santiago"), "2026-09-05T12:00:00Z", "2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z"},
		{"Santiago: 23:30 on the 5th, not yet the 6th", portero.PerDay(1).WithZone("America/Santiago"), "2026-09-06T03:30:00Z", "2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z"},
		{"Santiago: the 6th starts at the change and lasts 23 h", portero.PerDay(1).WithZone("America/Santiago"), "2026-09-06T04:00:00Z", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"},
		// New York: 2024-03-10 02:00 EST → 03:00 EDT (07:00 UTC) skips 02:30.
		{"New York days from 02:30: 01:45 EST is the day before", portero.PerDay(1).WithZone("America/New_York").WithOffset(150 * time.Minute), "2024-03-10T06:45:00Z", "2024-03-09T07:30:00Z", "2024-03-10T07:00:00Z"},
		{"New York days from 02:30: the day starts at 03:00 EDT", portero.PerDay(1).WithZone("America/New_York").WithOffset(150 * time.Minute), "2024-03-10T07:00:00Z", "2024-03-10T07:00:00Z", "2024-03-11T06:30:00Z"},
		// East of UTC the same rule: Madrid's 02:30 of 31 March 2024 is
		// skipped, so the day starts at 03:00 CEST (01:00 UTC), not 03:30.
		{"Madrid days from 02:30: the day starts at 03:00 CEST", portero.PerDay(1).WithZone("Europe/Madrid").WithOffset(150 * time.Minute), "2024-03-31T01:15:00Z", "2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"},
		// A start that an autumn change repeats is its first pass, in every
		// zone. Madrid: 2024-10-27 03:00 CEST → 02:00 CET (01:00 UTC), so
		// 02:30 is 00:30 UTC (CEST) and again 01:30 UTC (CET).
		{"Madrid days from 02:30: the first 02:30 of 27 October", portero.PerDay(1).WithZone("Europe/Madrid").WithOffset(150 * time.Minute), "2024-10-27T01:00:00Z", "2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"},
		// New York: 2024-11-03 02:00 EDT → 01:00 EST (06:00 UTC): 01:30 is
		// 05:30 UTC (EDT) and again 06:30 UTC (EST).
		{"New York days from 01:30: the first 01:30 of 3 November", portero.PerDay(1).WithZone("America/New_York").WithOffset(90 * time.Minute), "2024-11-03T06:15:00Z", "2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"},
		// Samoa skipped 30 December 2011 (29th 23:59:59 −10 → 31st 00:00
		// +14, at 10:00 UTC): the 29th ends where the 31st begins.
		{"Samoa: the day before a skipped day", portero.PerDay(1).WithZone("Pacific/Apia"), "2011-12-30T09:00:00Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z"},
		{"Samoa: the day after a skipped day", portero.PerDay(1).WithZone("Pacific/Apia"), "2011-12-30T10:00:00Z", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z"},
	}
	for _, tt := range tests {
		start, end := tt.l.PeriodAt(utc(tt.at))
		if !start.Equal(utc(tt.start)) || !end.Equal(utc(tt.end)) {
			t.Errorf("%s: %v.PeriodAt(%s) = [%s, %s), want [%s, %s)", tt.name, tt.l, tt.at,
				start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), tt.start, tt.end)
		}
	}
}

// PeriodAt's periods tile time in every zone, period and offset, also
// where a shifted start falls in an hour that a change skips or repeats:
// t is in its period, the period's start maps to the same period, its end
// starts the next one, boundaries are whole seconds, and lengths are
// within an hour or two of the calendar's.
func TestPeriodAtTiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	zones := []string{"", "Europe/Madrid", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Kathmandu", "Pacific/Apia"}
	offsets := map[portero.Period][]time.Duration{
		portero.Daily:   {0, 2*time.Hour + 30*time.Minute, 6 * time.Hour, 23*time.Hour + 59*time.Minute + 59*time.Second},
		portero.Weekly:  {0, 6 * 24 * time.Hour, 2*24*time.Hour + 2*time.Hour},
		portero.Monthly: {0, 14 * 24 * time.Hour, 27*24*time.Hour + 23*time.Hour, 2 * time.Hour},
	}
	from := utc("2023-01-01T00:00:00Z").Unix()
	to := utc("2026-01-01T00:00:00Z").Unix()
	for _, z := range zones {
		for _, p := range portero.Periods {
			for _, off := range offsets[p] {
				l := portero.Limit{Count: 1, Period: p, Zone: z, Offset: off}
				if err := l.Validate(); err != nil {
					t.Fatalf("%v: %v", l, err)
				}
				lo, hi := p.Nominal()-3*time.Hour, p.Nominal()+3*time.Hour
				if p == portero.Monthly {
					lo, hi = 28*24*time.Hour-3*time.Hour, 31*24*time.Hour+3*time.Hour
				}
				for range 300 {
					at := time.Unix(from+r.Int64N(to-from), r.Int64N(1e9))
					start, end := l.PeriodAt(at)
					if at.Before(start) || !at.Before(end) {
						t.Fatalf("%v.PeriodAt(%v) = [%v, %v): does not contain it", l, at, start, end)
					}
					if s2, e2 := l.PeriodAt(start); !s2.Equal(start) || !e2.Equal(end) {
						t.Fatalf("%v.PeriodAt(start %v) = [%v, %v), want [%v, %v)", l, start, s2, e2, start, end)
					}
					if s3, _ := l.PeriodAt(end); !s3.Equal(end) {
						t.Fatalf("%v.PeriodAt(end %v) starts at %v, want the end", l, end, s3)
					}
					if s4, e4 := l.PeriodAt(start.Add(-time.Nanosecond)); !e4.Equal(start) || !s4.Before(start) {
						t.Fatalf("%v: the period before %v is [%v, %v)", l, start, s4, e4)
					}
					if start.Nanosecond() != 0 || end.Nanosecond() != 0 {
						t.Fatalf("%v: boundaries %v, %v are not whole seconds", l, start, end)
					}
					if n := end.Sub(start); n < lo || n > hi {
						t.Fatalf("%v: period [%v, %v) lasts %v, want %v to %v", l, start, end, n, lo, hi)
					}
				}
			}
		}
	}
}

// Every period from 2023 to 2025 (and Samoa's 2011) starts where the rule
// says, checked against an oracle that reads the definition differently:
// the first instant whose local time is at or after the nominal start N is
// either an instant that reads exactly N (N − offset, for an offset the
// zone has there) or a change of offset the clock jumps across N at; the
// oracle takes the earliest candidate that reads N or later.
func TestPeriodStartsAtFirstLocalInstant(t *testing.T) {
	type span struct{ from, to string }
	zones := map[string]span{
		"America/Santiago": {"2023-01-01", "2026-01-01"}, "America/New_York": {"2023-01-01", "2026-01-01"},
		"Europe/Madrid": {"2023-01-01", "2026-01-01"}, "Australia/Lord_Howe": {"2023-01-01", "2026-01-01"},
		"Pacific/Apia": {"2011-12-01", "2012-02-01"},
	}
	offsets := map[portero.Period][]time.Duration{
		portero.Daily:   {0, 90 * time.Minute, 150 * time.Minute, 23*time.Hour + 59*time.Minute + 59*time.Second},
		portero.Weekly:  {0, 6*24*time.Hour + 150*time.Minute},
		portero.Monthly: {0, 150 * time.Minute},
	}
	for zone, sp := range zones {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range portero.Periods {
			for _, off := range offsets[p] {
				l := portero.Limit{Count: 1, Period: p, Zone: zone, Offset: off}
				// The nominal starts, as local dates and times written in UTC.
				var walls []time.Time
				for d := utc(sp.from + "T00:00:00Z"); d.Before(utc(sp.to + "T00:00:00Z")); d = d.AddDate(0, 0, 1) {
					if (p == portero.Weekly && d.Weekday() == time.Monday) || (p == portero.Monthly && d.Day() == 1) || p == portero.Daily {
						walls = append(walls, d.Add(off))
					}
				}
				for i := 0; i+1 < len(walls); i++ {
					start, next := firstReading(walls[i], loc), firstReading(walls[i+1], loc)
					if !start.Before(next) {
						continue // a period the calendar skipped whole
					}
					s, e := l.PeriodAt(start)
					if !s.Equal(start) || !e.Equal(next) {
						t.Fatalf("%v: the period of nominal start %s is [%s, %s), want [%s, %s)", l, walls[i].Format(time.DateTime),
							s.UTC().Format(time.RFC3339), e.UTC().Format(time.RFC3339), start.UTC().Format(time.RFC3339), next.UTC().Format(time.RFC3339))
					}
				}
			}
		}
	}
}

// firstReading is the oracle of TestPeriodStartsAtFirstLocalInstant: the
// earliest of the candidates within a day and two hours of wall that reads
// wall or later on loc's clock (readings compared as UTC times).
func firstReading(wall time.Time, loc *time.Location) time.Time {
	reads := func(u time.Time) time.Time {
		r := u.In(loc)
		return time.Date(r.Year(), r.Month(), r.Day(), r.Hour(), r.Minute(), r.Second(), r.Nanosecond(), time.UTC)
	}
	var best time.Time
	consider := func(c time.Time) {
		if !reads(c).Before(wall) && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	for u := wall.Add(-26 * time.Hour); u.Before(wall.Add(26 * time.Hour)); {
		_, off := u.In(loc).Zone()
		if c := wall.Add(-time.Duration(off) * time.Second); reads(c).Equal(wall) {
			consider(c)
		}
		_, end := u.In(loc).ZoneBounds()
		if end.IsZero() {
			break
		}
		consider(end)
		u = end
	}
	return best
}

func TestCalendarValidate(t *testing.T) {
	day := 24 * time.Hour
	bad := []struct {
		l       portero.Limit
		mention string
	}{
		{portero.Limit{Count: 1, Period: "fortnight"}, `period "fortnight"`},
		{portero.Limit{Period: portero.Daily}, "count 0"},
		{portero.Limit{Count: 1, Period: portero.Daily, Window: time.Hour}, "window 1h0m0s must be zero"},
		{portero.Limit{Count: 1, Period: portero.Daily, Burst: 2}, "no burst or rate"},
		{portero.Limit{Count: 1, Period: portero.Daily, Rate: 2}, "no burst or rate"},
		{portero.PerDay(1).WithOffset(-time.Second), "offset -1s"},
		{portero.PerDay(1).WithOffset(day), "offset 1d: want at least 0 and less than 1d"},
		{portero.PerWeek(1).WithOffset(7 * day), "less than 7d"},
		{portero.PerMonth(1).WithOffset(28 * day), "less than 28d"},
		{portero.PerDay(1).WithOffset(1500 * time.Millisecond), "whole seconds"},
		{portero.PerDay(1).WithZone("Nowhere/Else"), `zone "Nowhere/Else"`},
		{portero.PerDay(1).WithZone("Local"), "Local depends on the machine"},
		{portero.Limit{Count: 1, Window: time.Second, Zone: "UTC"}, "need a calendar period"},
		{portero.Limit{Count: 1, Window: time.Second, Offset: time.Hour}, "need a calendar period"},
	}
	for _, tt := range bad {
		err := tt.l.Validate()
		if !errors.Is(err, portero.ErrInvalidLimit) || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidLimit mentioning %q", tt.l, err, tt.mention)
		}
		if s, e := tt.l.PeriodAt(time.Now()); !s.IsZero() || !e.IsZero() {
			t.Errorf("%+v.PeriodAt = %v, %v for an invalid limit, want zero times", tt.l, s, e)
		}
	}
	for _, l := range []portero.Limit{portero.PerDay(500000), portero.PerWeek(10).WithOffset(6 * day), portero.PerMonth(100000).WithZone("Europe/Madrid").WithOffset(27*day + 23*time.Hour + 59*time.Minute + 59*time.Second)} {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v", l, err)
		}
		if err := l.ValidateFor(portero.FixedWindow); err != nil {
			t.Errorf("%+v.ValidateFor(fixed-window) = %v", l, err)
		}
		for _, a := range portero.Algorithms {
			if a == portero.FixedWindow {
				continue
			}
			if err := l.ValidateFor(a); !errors.Is(err, portero.ErrInvalidLimit) || !strings.Contains(err.Error(), "counted by fixed-window only") {
				t.Errorf("%+v.ValidateFor(%s) = %v, want a calendar quota to need fixed-window", l, a, err)
			}
			r := portero.Rule{Name: "q", Algorithm: a, Limit: l}
			if err := r.Validate(); !errors.Is(err, portero.ErrInvalidLimit) {
				t.Errorf("%+v.Validate() = %v, want ErrInvalidLimit", r, err)
			}
		}
	}
}

func ExampleLimit_PeriodAt() {
	// 500,000 per calendar day in Madrid: the day of the spring change has
	// 23 hours, and the quota comes back at Madrid's midnight.
	l := portero.PerDay(500000).WithZone("Europe/Madrid")
	start, end := l.PeriodAt(time.Date(2024, 3, 31, 12, 0, 0, 0, time.UTC))
	fmt.Println(start.UTC(), end.UTC(), end.Sub(start))
	// Output: 2024-03-30 23:00:00 +0000 UTC 2024-03-31 22:00:00 +0000 UTC 23h0m0s
}
