package client

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Seeds live in testdata/fuzz/<FuzzName>/ as well as in the f.Add calls.

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "", "-1", "1.5", "99999999999999999999", "Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT", "Tuesday, 01-Dec-76 00:00:00 GMT", "Monday, 29-Feb-00 00:00:00 GMT", "Sun Nov  6 08:49:37 1994", "Sun, 31 Dec 9999 23:59:59 GMT", " 5 ", "5s"} {
		f.Add(s, int64(784111777))
	}
	f.Add("Tuesday, 01-Dec-76 00:00:00 GMT", int64(1780315200)) // 50.5 years after 2026-06-01: 1976
	f.Fuzz(func(t *testing.T, v string, refUnix int64) {
		ref := time.Unix(refUnix%(1<<40), 0).UTC()
		d, ok := ParseRetryAfter(v, ref)
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, negative", v, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, false: a rejected value must give 0", v, d)
		}
		if s := strings.Trim(v, " \t"); ok && isDigits(s) && len(s) < 10 {
			var n int64
			for _, c := range s {
				n = n*10 + int64(c-'0')
			}
			if d != time.Duration(n)*time.Second {
				t.Fatalf("ParseRetryAfter(%q) = %v, want %ds", v, d, n)
			}
		}
		// RFC 850 dates: the two-digit year lands in (ref − 50 y, ref + 50 y]
		// with its digits, month, day and clock unchanged (RFC 9110 §5.6.7).
		if s := strings.Trim(v, " \t"); strings.HasSuffix(s, " GMT") {
			if p, err := time.Parse(time.RFC850, s); err == nil {
				_, imf := time.Parse(http.TimeFormat, s)
				_, asc := time.Parse(time.ANSIC, s)
				if imf != nil && asc != nil {
					checkTwoDigitYear(t, s, p, ref)
				}
			}
		}
		h := http.Header{"Retry-After": {v}, "Date": {v}}
		if d2, _ := RetryAfter(h, ref); d2 < 0 {
			t.Fatalf("RetryAfter(%q) = %v, negative", v, d2)
		}
	})
}

func checkTwoDigitYear(t *testing.T, v string, parsed, ref time.Time) {
	t.Helper()
	got, ok := parseHTTPDate(v, ref)
	if !ok {
		return // 29 February of a year that is not a leap year
	}
	p := parsed.UTC()
	mod100 := func(y int) int { return (y%100 + 100) % 100 }
	if mod100(got.Year()) != mod100(p.Year()) {
		t.Fatalf("parseHTTPDate(%q) = %v: the year's last two digits changed from %02d", v, got, mod100(p.Year()))
	}
	if got.Month() != p.Month() || got.Day() != p.Day() || got.Hour() != p.Hour() || got.Minute() != p.Minute() || got.Second() != p.Second() {
		t.Fatalf("parseHTTPDate(%q) = %v: the date or clock changed from %v", v, got, p)
	}
	if hi, lo := ref.AddDate(50, 0, 0), ref.AddDate(-50, 0, 0); got.After(hi) || !got.After(lo) {
		t.Fatalf("parseHTTPDate(%q, ref %v) = %v, want within (%v, %v]", v, ref, got, lo, hi)
	}
	if d, ok := ParseRetryAfter(v, ref); !ok || d != max(0, got.Sub(ref)) {
		t.Fatalf("ParseRetryAfter(%q, ref %v) = %v, %v, want %v", v, ref, d, ok, max(0, got.Sub(ref)))
	}
}

func FuzzParsePolicies(f *testing.F) {
	for _, s := range []string{`"burst";q=100;w=60,"daily";q=1000;w=86400`, `"d";q=10;qu="content-bytes";w=10;pk=:cHsdsRa894==:`,
		`d;q=1`, `"d";q=-1`, `"d";q=1;w=0`, `("a" "b");q=1`, `"x";q=999999999999999;w=999999999999999`, ``, `,`} {
		f.Add(s, `"burst";r=5;t=30`)
	}
	f.Fuzz(func(t *testing.T, pol, lim string) {
		ps, perr := ParsePolicies([]string{pol})
		if perr != nil && (!errors.Is(perr, ErrMalformedField) || ps != nil) {
			t.Fatalf("ParsePolicies(%q) = %v, %v: errors must wrap ErrMalformedField and return nil", pol, ps, perr)
		}
		for _, p := range ps {
			if p.Quota < 0 || p.Window < 0 || p.Unit == "" {
				t.Fatalf("ParsePolicies(%q) gave %+v", pol, p)
			}
		}
		ls, lerr := ParseLimits([]string{lim})
		if lerr != nil && (!errors.Is(lerr, ErrMalformedField) || ls != nil) {
			t.Fatalf("ParseLimits(%q) = %v, %v", lim, ls, lerr)
		}
		for _, l := range ls {
			if l.Remaining < 0 || l.Window < 0 {
				t.Fatalf("ParseLimits(%q) gave %+v", lim, l)
			}
		}
		// Whatever parsed, the pacer must stay sane.
		p := NewPacer()
		p.Observe(t0, ps, ls)
		for i := range 3 {
			tm := t0.Add(time.Duration(i) * time.Second)
			if d, w := p.Delay(tm), p.Take(tm); d < 0 || w < 0 || d != w {
				t.Fatalf("after %q / %q: Delay = %v, Take = %v, want equal and >= 0", pol, lim, d, w)
			}
		}
	})
}

func FuzzParseLimits(f *testing.F) {
	for _, s := range []string{`"default";r=50;t=30`, `"day";r=0;pk=:QXBwLTk5OQ==:`, `"d";t=5`, `"d";r=1;t=-1`, `"a";r=1, "b";r=2;t=1`, `"x";r=1;t=1.5`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lim string) {
		ls, err := ParseLimits(strings.Split(lim, "\n"))
		if err != nil && !errors.Is(err, ErrMalformedField) {
			t.Fatalf("ParseLimits(%q) error %v does not wrap ErrMalformedField", lim, err)
		}
		for _, l := range ls {
			if l.Remaining < 0 || l.Window < 0 || (!l.HasWindow && l.Window != 0) {
				t.Fatalf("ParseLimits(%q) gave %+v", lim, l)
			}
		}
	})
}
