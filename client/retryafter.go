package client

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxDelaySeconds is the largest delay-seconds value that fits a
// time.Duration; larger values (and values that overflow uint64) are clamped
// to it and then, by the Transport, to Config.MaxRetryAfter.
const maxDelaySeconds = math.MaxInt64 / int64(time.Second)

// ParseRetryAfter parses one Retry-After field value (RFC 9110 §10.2.3) and
// returns how long to wait, measured from ref.
//
// The value is either delay-seconds (a non-negative decimal integer, counted
// from when the response was received, so ref does not matter) or an
// HTTP-date in any of the three formats a recipient must accept: IMF-fixdate
// ("Sun, 06 Nov 1994 08:49:37 GMT"), the obsolete RFC 850 form
// ("Sunday, 06-Nov-94 08:49:37 GMT", two-digit years resolved as RFC 9110
// §5.6.7 says, relative to ref) and asctime ("Sun Nov  6 08:49:37 1994").
// For a date, ref should be the response's Date field when present (so the
// client's clock skew does not matter) and otherwise the time the response
// arrived. A date at or before ref yields 0.
//
// Anything else — a sign, a fraction, a unit, an empty or garbled value —
// reports ok == false, and the caller falls back to its own backoff. Values
// too large for a time.Duration are clamped to about 292 years; callers cap
// them further. ParseRetryAfter never panics.
func ParseRetryAfter(value string, ref time.Time) (d time.Duration, ok bool) {
	v := strings.Trim(value, " \t")
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > uint64(maxDelaySeconds) { // only overflow is possible here
			return time.Duration(maxDelaySeconds) * time.Second, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, ok := parseHTTPDate(v, ref)
	if !ok {
		return 0, false
	}
	if !t.After(ref) {
		return 0, true
	}
	d = t.Sub(ref) // saturates at the Duration range
	return d, true
}

// RetryAfter reads the Retry-After field of h and returns the wait it asks
// for, as [ParseRetryAfter] does. received is when the response arrived; a
// date is measured against h's Date field when that parses, else against
// received. A field repeated on several lines is malformed (it is a
// singleton) and reports ok == false.
func RetryAfter(h http.Header, received time.Time) (time.Duration, bool) {
	vals := h.Values("Retry-After")
	if len(vals) != 1 {
		return 0, false
	}
	ref := received
	if dates := h.Values("Date"); len(dates) == 1 {
		if t, err := http.ParseTime(strings.TrimSpace(dates[0])); err == nil {
			ref = t
		}
	}
	return ParseRetryAfter(vals[0], ref)
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parseHTTPDate accepts exactly the three HTTP-date formats. Go's
// http.ParseTime would also take any zone abbreviation in the RFC 850 form
// and resolves two-digit years by a fixed 1969 pivot; HTTP-dates are always
// GMT, and RFC 9110 §5.6.7 reads a two-digit year relative to ref (see
// [resolveTwoDigitYear]).
func parseHTTPDate(v string, ref time.Time) (time.Time, bool) {
	if t, err := time.Parse(http.TimeFormat, v); err == nil {
		return t, true
	}
	if t, err := time.Parse(time.ANSIC, v); err == nil {
		return t, true
	}
	if !strings.HasSuffix(v, " GMT") {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC850, v)
	if err != nil {
		return time.Time{}, false
	}
	return resolveTwoDigitYear(t.UTC(), ref)
}

// resolveTwoDigitYear gives t, parsed from a two-digit year, the year that
// puts it in the 100 years (ref − 50 years, ref + 50 years]: RFC 9110 §5.6.7
// says a timestamp that appears to be more than 50 years in the future is the
// most recent past year with the same last two digits. The comparison is of
// whole timestamps, not years: from 1 June 2026, "01-Dec-76" is 50.5 years
// ahead, so 1976. It reports false when the date does not exist in that
// year (29 February of 2100).
func resolveTwoDigitYear(t, ref time.Time) (time.Time, bool) {
	ref = ref.UTC()
	hi, lo := ref.AddDate(50, 0, 0), ref.AddDate(-50, 0, 0)
	yy := (t.Year()%100 + 100) % 100
	c := ref.Year() - (ref.Year()%100+100)%100 // ref's century, also for years before 0
	year := c + yy
	switch {
	case laterThan(year, t, hi):
		year -= 100
	case !laterThan(year, t, lo):
		year += 100
	}
	r := time.Date(year, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
	if r.Day() != t.Day() {
		return time.Time{}, false
	}
	return r, true
}

// laterThan reports whether t's date and time of day, in the given year, is
// after u. It compares without building the date, which may not exist.
func laterThan(year int, t, u time.Time) bool {
	if year != u.Year() {
		return year > u.Year()
	}
	// 2000 is a leap year: every month and day of t exists in it.
	a := time.Date(2000, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
	b := time.Date(2000, u.Month(), u.Day(), u.Hour(), u.Minute(), u.Second(), u.Nanosecond(), time.UTC)
	return a.After(b)
}
