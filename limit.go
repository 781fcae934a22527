package portero

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Limit says how much a key may use. Window algorithms read it as "Count
// requests per Window". The buckets, GCRA and the queue read it as a rate and
// a burst: the rate is Rate per second (or Count per Window when Rate is
// zero) and the burst, the bucket's capacity, is Burst (or Count when Burst
// is zero). A calendar limit (Period set) is a quota: Count per calendar
// day, week or month, counted by the fixed window on the calendar of Zone;
// its Window, Burst and Rate are zero (see calendar.go). The zero value is
// invalid.
type Limit struct {
	// Count is L, the number of cost units admitted per Window. Required.
	Count int64
	// Window is W, the span Count refers to. Required.
	Window time.Duration
	// Burst is B, the capacity of a bucket or queue; 0 means Count.
	Burst int64
	// Rate is r in units per second for the buckets, GCRA and the queue;
	// 0 means Count/Window.
	Rate float64

	// Period, when set, makes the limit a calendar quota of Count per
	// Daily, Weekly or Monthly period; the empty Period (the zero value)
	// means a limit over Window.
	Period Period
	// Zone is the IANA time zone whose calendar Period follows, such as
	// "Europe/Madrid"; empty means UTC. A name rather than a
	// *time.Location so that equal limits compare equal (a Rule is a map
	// key, and a reload keeps the counters of equal rules).
	Zone string
	// Offset moves the start of every Period from its natural start (local
	// midnight, Monday, the 1st) by a wall-clock span: 6h makes days run
	// from 06:00 to 06:00, 6d makes weeks start on Sunday, 14d makes months
	// start on the 15th. Whole seconds, from 0 to less than a day, a week
	// or 28 days. (It is not AWS's quota offset; see docs/plans.md.)
	Offset time.Duration
}

// PerSecond, PerMinute and PerHour build the common limits.
func PerSecond(n int64) Limit { return Limit{Count: n, Window: time.Second} }

// PerMinute returns n per minute.
func PerMinute(n int64) Limit { return Limit{Count: n, Window: time.Minute} }

// PerHour returns n per hour.
func PerHour(n int64) Limit { return Limit{Count: n, Window: time.Hour} }

// WithBurst returns l with its burst (bucket capacity) set to b.
func (l Limit) WithBurst(b int64) Limit { l.Burst = b; return l }

// Capacity returns the burst B: Burst, or Count when Burst is zero.
func (l Limit) Capacity() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Count
}

// Interval returns the time one unit of the rate takes to come back (1/r),
// rounded to the nearest nanosecond. The buckets, GCRA and the queue count in
// these whole nanoseconds so that they agree exactly with each other; for
// rates up to a million per second the rounding changes the rate by less than
// one part in a thousand, and not at all when 1/r is a whole number of ns.
func (l Limit) Interval() time.Duration {
	if l.Rate > 0 {
		return time.Duration(math.Round(float64(time.Second) / l.Rate))
	}
	if l.Count <= 0 {
		return 0
	}
	return (l.Window + time.Duration(l.Count)/2) / time.Duration(l.Count)
}

// Validate reports why l cannot be enforced, wrapping ErrInvalidLimit.
func (l Limit) Validate() error {
	if l.Period != "" || l.Zone != "" || l.Offset != 0 {
		return l.validateCalendar()
	}
	switch {
	case l.Count <= 0:
		return fmt.Errorf("%w: count %d: must be positive", ErrInvalidLimit, l.Count)
	case l.Window <= 0:
		return fmt.Errorf("%w: window %v: must be positive", ErrInvalidLimit, l.Window)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst %d: must not be negative", ErrInvalidLimit, l.Burst)
	case math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		return fmt.Errorf("%w: rate %v: must be a finite number", ErrInvalidLimit, l.Rate)
	case l.Rate < 0:
		return fmt.Errorf("%w: rate %v: must not be negative", ErrInvalidLimit, l.Rate)
	}
	if l.Rate > 0 && float64(time.Second)/l.Rate > float64(math.MaxInt64)/2 {
		return fmt.Errorf("%w: rate %v: too slow to represent", ErrInvalidLimit, l.Rate)
	}
	t := l.Interval()
	if t <= 0 || l.Rate > float64(time.Second) || (l.Rate == 0 && int64(l.Window) < l.Count) {
		return fmt.Errorf("%w: rate of %s: faster than one per nanosecond", ErrInvalidLimit, l)
	}
	if l.Capacity() > math.MaxInt64/int64(t) {
		return fmt.Errorf("%w: burst %d at one per %v: longer than 292 years to refill", ErrInvalidLimit, l.Capacity(), t)
	}
	return nil
}

// String formats l in the syntax ParseLimit reads, such as "100/min",
// "10/s burst 20" or "500000/day tz Europe/Madrid".
func (l Limit) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(l.Count, 10))
	b.WriteByte('/')
	if l.Period != "" {
		b.WriteString(string(l.Period))
		if l.Offset != 0 {
			b.WriteString(" offset ")
			b.WriteString(formatOffset(l.Offset))
		}
		if l.Zone != "" {
			b.WriteString(" tz ")
			b.WriteString(l.Zone)
		}
		return b.String()
	}
	b.WriteString(formatWindow(l.Window))
	if l.Burst > 0 {
		b.WriteString(" burst ")
		b.WriteString(strconv.FormatInt(l.Burst, 10))
	}
	if l.Rate > 0 {
		b.WriteString(" rate ")
		b.WriteString(strconv.FormatFloat(l.Rate, 'g', -1, 64))
	}
	return b.String()
}

func formatWindow(w time.Duration) string {
	for _, u := range windowUnits {
		if w == u.d {
			return u.names[0]
		}
	}
	return w.String()
}

// windowUnits are the units a window may be written in, each with every
// spelling ParseLimit accepts (plurals written out, so that no spelling can
// be read as another unit plus a plural "s": "ms" is the millisecond, never
// minutes). The first name is the one String prints. A new unit is one more
// line here; TestParseLimitUnits reads every spelling back.
var windowUnits = []struct {
	names []string
	d     time.Duration
}{
	{[]string{"ms", "msec", "msecs", "millisecond", "milliseconds"}, time.Millisecond},
	{[]string{"s", "sec", "secs", "second", "seconds"}, time.Second},
	{[]string{"min", "m", "mins", "minute", "minutes"}, time.Minute},
	{[]string{"h", "hr", "hrs", "hour", "hours"}, time.Hour},
	{[]string{"d"}, 24 * time.Hour}, // "day", "week", "month" are calendar periods (parsePeriod)
}

// unitNames maps every spelling of windowUnits to its length.
var unitNames = func() map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, u := range windowUnits {
		for _, n := range u.names {
			if _, dup := m[n]; dup {
				panic("portero: window unit " + n + " spelled twice")
			}
			m[n] = u.d
		}
	}
	return m
}()

// ParseLimit reads a limit such as "100/min", "5000/h", "10/s burst 20",
// "300/5m" or "1/2s rate 0.5". The form is
//
//	COUNT "/" WINDOW [ "burst" B ] [ "rate" R ]
//
// where WINDOW is a unit (ms, msec, millisecond; s, sec, second; m, min,
// minute; h, hr, hour; each also as a plural; d, 24 hours), a whole number
// of units ("250ms", "5m", "10min", "2d") or a Go duration ("1m30s",
// "1.5h"), B is a whole number and R a rate per second. A calendar quota
// is
//
//	COUNT "/" ( "day" | "week" | "month" ) [ "offset" D ] [ "tz" ZONE ]
//
// such as "500000/day", "10/week offset 6d" or "100000/month tz
// Europe/Madrid" (see Limit.Period, Limit.Offset, Limit.Zone): "day" is the
// calendar day; "d" is a window of 24 hours, except before "offset" or
// "tz", where it is the calendar day ("500000/d tz Europe/Madrid" is
// "500000/day tz Europe/Madrid"); a count or plural of the calendar words
// ("2days") is an error. Words are case insensitive, ZONE is
// not. The result is validated; errors wrap ErrInvalidLimit and quote the
// input. ParseQuota reads a quota, where "d" is always the calendar day.
func ParseLimit(s string) (Limit, error) {
	return parse(s, false)
}

func parse(s string, calendarDay bool) (Limit, error) {
	l, err := parseLimit(s, calendarDay)
	if err != nil {
		return Limit{}, fmt.Errorf("%w: %q: %s", ErrInvalidLimit, s, err)
	}
	if err := l.Validate(); err != nil {
		return Limit{}, fmt.Errorf("%q: %w", s, err)
	}
	return l, nil
}

// MustParseLimit is ParseLimit for literals in programs and tests; it panics
// on a malformed limit.
func MustParseLimit(s string) Limit {
	l, err := ParseLimit(s)
	if err != nil {
		panic(err)
	}
	return l
}

type limitError string

func (e limitError) Error() string { return string(e) }

// calendarWords reports whether the words after a limit's COUNT/WINDOW
// give a time zone or an offset, which only a calendar period takes.
func calendarWords(rest []string) bool {
	for i := 0; i < len(rest); i += 2 {
		if rest[i] == "tz" || rest[i] == "offset" {
			return true
		}
	}
	return false
}

// parseLimit reads s; calendarDay reads a window of "d" as the calendar
// day (ParseQuota).
func parseLimit(s string, calendarDay bool) (Limit, error) {
	// Words are case insensitive, but a zone name is not (Europe/Madrid):
	// raw keeps the fields as written. Lowering changes no space, so the
	// two have the same fields.
	raw := strings.Fields(s)
	fields := strings.Fields(strings.ToLower(s))
	if len(fields) == 0 || len(raw) != len(fields) {
		return Limit{}, limitError("empty limit, want COUNT/WINDOW such as 100/min")
	}
	// Allow "10 / s" as well as "10/s".
	head := fields[0]
	rest := fields[1:]
	for len(rest) > 0 && (strings.HasSuffix(head, "/") || strings.HasPrefix(rest[0], "/")) {
		head += rest[0]
		rest = rest[1:]
	}
	count, window, ok := strings.Cut(head, "/")
	if !ok {
		return Limit{}, limitError("missing \"/\": want COUNT/WINDOW such as 100/min")
	}
	var l Limit
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil {
		return Limit{}, limitError(fmt.Sprintf("count %q: not a whole number", count))
	}
	l.Count = n
	if l.Period, err = parsePeriod(window); err != nil {
		return Limit{}, err
	}
	if l.Period == "" {
		// "d" is a window of 24 hours, as it was before calendar quotas;
		// where only a calendar day can be meant (with tz or offset, or
		// read as a quota) it is the calendar day, so N/d, N/week and
		// N/month all name calendar periods without changing what an
		// existing N/d decides.
		if window == "d" && (calendarDay || calendarWords(rest)) {
			l.Period = Daily
		} else if l.Window, err = parseWindow(window); err != nil {
			return Limit{}, err
		}
	}
	offset := false
	for len(rest) > 0 {
		if len(rest) < 2 {
			return Limit{}, limitError(fmt.Sprintf("%q needs a value", rest[0]))
		}
		word, val, rawVal := rest[0], rest[1], raw[len(raw)-len(rest)+1]
		rest = rest[2:]
		switch word {
		case "tz", "offset":
			if l.Period == "" {
				return Limit{}, limitError(fmt.Sprintf("%s needs a calendar period: write COUNT/day, /week or /month (%q is a window of fixed length)", word, window))
			}
			if word == "tz" {
				if l.Zone != "" {
					return Limit{}, limitError("tz given twice")
				}
				l.Zone = rawVal
				continue
			}
			if offset {
				return Limit{}, limitError("offset given twice")
			}
			d, err := parseOffset(val)
			if err != nil {
				return Limit{}, err
			}
			l.Offset, offset = d, true
		case "burst":
			if l.Burst != 0 {
				return Limit{}, limitError("burst given twice")
			}
			b, err := strconv.ParseInt(val, 10, 64)
			if err != nil || b <= 0 {
				return Limit{}, limitError(fmt.Sprintf("burst %q: not a positive whole number", val))
			}
			l.Burst = b
		case "rate":
			if l.Rate != 0 {
				return Limit{}, limitError("rate given twice")
			}
			r, err := strconv.ParseFloat(strings.TrimSuffix(val, "/s"), 64)
			if err != nil || !(r > 0) || math.IsInf(r, 0) {
				return Limit{}, limitError(fmt.Sprintf("rate %q: not a positive number per second", val))
			}
			l.Rate = r
		default:
			return Limit{}, limitError(fmt.Sprintf("unexpected %q, want \"burst N\", \"rate R\", \"offset D\" or \"tz ZONE\"", word))
		}
	}
	return l, nil
}

func parseWindow(w string) (time.Duration, error) {
	if w == "" {
		return 0, limitError("missing window after \"/\"")
	}
	if d, ok := unitNames[w]; ok {
		return d, nil
	}
	// A whole number of units: "250ms", "10min", "2d".
	i := 0
	for i < len(w) && w[i] >= '0' && w[i] <= '9' {
		i++
	}
	if d, ok := unitNames[w[i:]]; ok && i > 0 {
		n, err := strconv.ParseInt(w[:i], 10, 64)
		if err != nil || n > math.MaxInt64/int64(d) {
			return 0, limitError(fmt.Sprintf("window %q: too long (at most %v)", w, time.Duration(math.MaxInt64)))
		}
		return time.Duration(n) * d, nil
	}
	d, err := time.ParseDuration(w)
	if err != nil {
		return 0, limitError(fmt.Sprintf("window %q: want a unit (ms, s, min, h, d), a number of them such as 10min, or a duration such as 1m30s", w))
	}
	return d, nil
}
