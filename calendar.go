package portero

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Period is the calendar period of a quota (Limit.Period): a limit of Count
// per calendar day, week or month, read on the calendar of Limit.Zone. The
// empty Period means the limit is not a calendar one and counts over its
// Window.
//
// A calendar period is not a fixed length of time: a day across a change
// to or from daylight-saving time lasts 23 or 25 hours, a month 28 to 31
// days. Periods follow the local calendar, so a quota of 500,000 per day in
// Europe/Madrid comes back at every Madrid midnight, whatever its length.
type Period string

// The calendar periods, named as AWS usage plans name them (DAY, WEEK,
// MONTH).
const (
	// Daily periods run from midnight to midnight, local time.
	Daily Period = "day"
	// Weekly periods are ISO 8601 weeks: Monday 00:00 to the next Monday.
	Weekly Period = "week"
	// Monthly periods run from the 1st at 00:00 to the 1st of the next month.
	Monthly Period = "month"
)

// Periods lists the calendar periods in a stable order.
var Periods = []Period{Daily, Weekly, Monthly}

// String returns the period's name.
func (p Period) String() string { return string(p) }

// Nominal returns the period's usual length, 24 hours, 7 days or 30 days,
// for an announcement that needs one number (RateLimit-Policy's w). The
// decisions never use it: they follow the calendar.
func (p Period) Nominal() time.Duration {
	switch p {
	case Daily:
		return 24 * time.Hour
	case Weekly:
		return 7 * 24 * time.Hour
	case Monthly:
		return 30 * 24 * time.Hour
	}
	return 0
}

// maxOffset is the exclusive bound of Limit.Offset for each period: the
// shortest the period's natural span can be in days (a month can have 28),
// so that a shifted start never passes the next natural one.
func (p Period) maxOffset() time.Duration {
	if p == Monthly {
		return 28 * 24 * time.Hour
	}
	return p.Nominal()
}

// PerDay, PerWeek and PerMonth build calendar quotas in UTC; WithZone and
// WithOffset move them to another calendar.
func PerDay(n int64) Limit { return Limit{Count: n, Period: Daily} }

// PerWeek returns n per ISO week (Monday to Monday), in UTC.
func PerWeek(n int64) Limit { return Limit{Count: n, Period: Weekly} }

// PerMonth returns n per calendar month, in UTC.
func PerMonth(n int64) Limit { return Limit{Count: n, Period: Monthly} }

// WithZone returns l with its calendar read in the IANA time zone zone.
func (l Limit) WithZone(zone string) Limit { l.Zone = zone; return l }

// WithOffset returns l with its periods starting offset after their natural
// start (see Limit.Offset).
func (l Limit) WithOffset(offset time.Duration) Limit { l.Offset = offset; return l }

// IsCalendar reports whether l is a calendar limit (Period set).
func (l Limit) IsCalendar() bool { return l.Period != "" }

// zones caches the locations limits name, so that deciding never reads the
// zone database. Only names that loaded are kept, and those come from
// configuration, not from clients: the map stays as small as the database.
var zones sync.Map // string → *time.Location

// Location returns the time zone of a calendar limit: UTC when Zone is
// empty, otherwise the IANA zone it names (loaded once and cached). Errors
// wrap ErrInvalidLimit. "Local" is refused: it would make a quota depend on
// the machine that happens to decide it.
func (l Limit) Location() (*time.Location, error) {
	if l.Zone == "" {
		return time.UTC, nil
	}
	if v, ok := zones.Load(l.Zone); ok {
		return v.(*time.Location), nil
	}
	if l.Zone == "Local" {
		return nil, fmt.Errorf("%w: zone Local: name an IANA zone such as Europe/Madrid; Local depends on the machine", ErrInvalidLimit)
	}
	loc, err := time.LoadLocation(l.Zone)
	if err != nil {
		return nil, fmt.Errorf("%w: zone %q: %v", ErrInvalidLimit, l.Zone, err)
	}
	zones.Store(l.Zone, loc)
	return loc, nil
}

// PeriodAt returns the calendar period of l that contains t, as the
// half-open interval [start, end): an instant exactly at a boundary belongs
// to the period that starts there. Boundaries are whole seconds. Both are
// the zero time when l is not a valid calendar limit.
//
// A period starts at its nominal start (local midnight; Monday for a week;
// the 1st for a month) shifted by Offset on the wall clock: with Offset 6h
// days run from 06:00 to 06:00 local time, also across a change of
// daylight-saving time. Precisely, a period starts at the first instant
// whose local time is at or after its nominal start (localStart): where a
// spring change skips that time, at the change; where an autumn change
// repeats it, at its first pass. The rule is the same in every zone, east
// or west of UTC.
func (l Limit) PeriodAt(t time.Time) (start, end time.Time) {
	if l.validateCalendar() != nil {
		return time.Time{}, time.Time{}
	}
	loc, _ := l.Location()
	days := int(l.Offset / (24 * time.Hour))
	rest := l.Offset % (24 * time.Hour)
	h, m, s := int(rest/time.Hour), int(rest%time.Hour/time.Minute), int(rest%time.Minute/time.Second)
	// d is the natural start of a period as a (possibly unnormalised) local
	// date; step moves it by n periods.
	type date struct {
		y int
		m time.Month
		d int
	}
	at := func(d date) time.Time {
		return localStart(time.Date(d.y, d.m, d.d+days, h, m, s, 0, time.UTC), loc)
	}
	step := func(d date, n int) date {
		switch l.Period {
		case Daily:
			d.d += n
		case Weekly:
			d.d += 7 * n
		default:
			d.m += time.Month(n)
		}
		return d
	}
	lt := t.In(loc)
	y, mo, dd := lt.Date()
	d := date{y, mo, dd}
	switch l.Period {
	case Weekly:
		d.d -= (int(lt.Weekday()) + 6) % 7 // back to Monday
	case Monthly:
		d.d = 1
	}
	start = at(d)
	for t.Before(start) {
		d = step(d, -1)
		start = at(d)
	}
	end = at(step(d, 1))
	// Only where a change turns the clock back across a boundary can t read
	// a date whose period has already ended.
	for !t.Before(end) {
		d = step(d, 1)
		start, end = end, at(step(d, 1))
	}
	return start, end
}

// maxZoneOffset bounds the offset from UTC of any zone: less than 26 hours
// (RFC 8536, section 3.2, which Go's zone database follows).
const maxZoneOffset = 26 * time.Hour

// localStart returns the first instant whose local time in loc is at or
// after wall, a local date and time written as a UTC time: the instant the
// clock reads wall when it reads it once, its first pass when an autumn
// change repeats it, and the change itself when a spring change skips it.
// The standard library's time.Date leaves the last two unspecified (and
// resolves a skipped time an hour early west of UTC, late east of it).
//
// It walks the zone's spans of constant offset from one where no instant
// can read wall or later yet: in a span of offset off, the clock reads
// wall at wall−off; if that is before the span began, the span's first
// instant already reads later than wall (the change skipped it).
func localStart(wall time.Time, loc *time.Location) time.Time {
	u := wall.Add(-maxZoneOffset)
	for {
		z := u.In(loc)
		_, off := z.Zone()
		_, spanEnd := z.ZoneBounds()
		first := wall.Add(-time.Duration(off) * time.Second)
		if first.Before(u) {
			first = u
		}
		if spanEnd.IsZero() || first.Before(spanEnd) {
			return first
		}
		u = spanEnd
	}
}

// validateCalendar reports why a calendar limit cannot be enforced.
func (l Limit) validateCalendar() error {
	switch {
	case l.Period == "":
		return fmt.Errorf("%w: zone %q and offset %v need a calendar period (day, week or month)", ErrInvalidLimit, l.Zone, l.Offset)
	case l.Period.maxOffset() == 0:
		return fmt.Errorf("%w: period %q: want day, week or month", ErrInvalidLimit, string(l.Period))
	case l.Count <= 0:
		return fmt.Errorf("%w: count %d: must be positive", ErrInvalidLimit, l.Count)
	case l.Window != 0:
		return fmt.Errorf("%w: a calendar limit counts per %s, not per window: window %v must be zero", ErrInvalidLimit, l.Period, l.Window)
	case l.Burst != 0 || l.Rate != 0:
		return fmt.Errorf("%w: a calendar limit (per %s) has no burst or rate: pair it with a rate rule instead", ErrInvalidLimit, l.Period)
	case l.Offset < 0 || l.Offset >= l.Period.maxOffset():
		return fmt.Errorf("%w: offset %s: want at least 0 and less than %s for a %s", ErrInvalidLimit, formatOffset(l.Offset), formatOffset(l.Period.maxOffset()), l.Period)
	case l.Offset%time.Second != 0:
		return fmt.Errorf("%w: offset %v: want whole seconds", ErrInvalidLimit, l.Offset)
	}
	_, err := l.Location()
	return err
}

// ValidateFor reports why algorithm a cannot enforce l: l.Validate's
// reasons, and a calendar limit under any algorithm but FixedWindow (a
// quota is a fixed window on the calendar; a sliding or bucket algorithm
// has no calendar). It does not check that a is a known algorithm.
func (l Limit) ValidateFor(a Algorithm) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.IsCalendar() && a != FixedWindow {
		return fmt.Errorf("%w: %s is a calendar quota, counted by %s only, not %s (for a sliding or bucket limit over a fixed span, give a duration such as %d/24h)",
			ErrInvalidLimit, l, FixedWindow, a, l.Count)
	}
	return nil
}

// formatOffset writes an offset as ParseLimit reads it: whole days as "Nd",
// then hours, minutes and seconds ("14d", "6h", "1d6h30m"); 0 is "0s".
func formatOffset(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	var b []byte
	if d < 0 {
		b = append(b, '-')
		d = -d
	}
	for _, u := range []struct {
		d    time.Duration
		unit byte
	}{{24 * time.Hour, 'd'}, {time.Hour, 'h'}, {time.Minute, 'm'}, {time.Second, 's'}} {
		if n := d / u.d; n > 0 {
			b = fmt.Appendf(b, "%d%c", n, u.unit)
			d -= n * u.d
		}
	}
	if d > 0 {
		b = fmt.Appendf(b, "%dns", int64(d))
	}
	return string(b)
}

// ParseQuota reads a calendar quota, as a usage plan's quota is written:
// ParseLimit's COUNT/day, /week or /month [offset D] [tz ZONE], with "d"
// the calendar day as well ("500000/d" is "500000/day"). A limit over a
// window of fixed length ("10/h", "1000/24h") is an error wrapping
// ErrInvalidLimit.
func ParseQuota(s string) (Limit, error) {
	l, err := parse(s, true)
	if err == nil && !l.IsCalendar() {
		err = fmt.Errorf("%w: %q: a quota is per calendar day, week or month, such as 500000/day, 500000/d or 100000/month", ErrInvalidLimit, s)
	}
	if err != nil {
		return Limit{}, err
	}
	return l, nil
}

// parsePeriod reads the window of ParseLimit as a calendar period: "day",
// "week" or "month" (the words AWS usage plans use) are one; a count or a
// plural of them ("2days", "weeks") is an error, since a calendar has no
// multiple periods; anything else returns "" for parseWindow to read.
func parsePeriod(w string) (Period, error) {
	for _, p := range Periods {
		if w == string(p) {
			return p, nil
		}
	}
	unit := strings.TrimLeft(w, "0123456789")
	for _, p := range Periods {
		if unit == string(p) || unit == string(p)+"s" {
			return "", limitError(fmt.Sprintf("window %q: a calendar period is one day, week or month (write /%s); for a span of fixed length write a duration such as 2d or 48h", w, p))
		}
	}
	return "", nil
}

// parseOffset reads an offset: whole days "Nd", then a Go duration, or
// both ("14d", "6h", "1d6h30m"; "0s").
func parseOffset(v string) (time.Duration, error) {
	bad := limitError(fmt.Sprintf("offset %q: want days and a duration such as 6h, 14d or 1d6h30m", v))
	var d time.Duration
	rest := v
	if days, after, ok := strings.Cut(v, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 || n > 31 {
			return 0, bad
		}
		d, rest = time.Duration(n)*24*time.Hour, after
	}
	if rest != "" {
		x, err := time.ParseDuration(rest)
		if err != nil || x < 0 {
			return 0, bad
		}
		d += x
	}
	return d, nil
}
