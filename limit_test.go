package portero_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
)

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in   string
		want portero.Limit
	}{
		{"100/min", portero.Limit{Count: 100, Window: time.Minute}},
		{"100/minute", portero.Limit{Count: 100, Window: time.Minute}},
		{"100/m", portero.Limit{Count: 100, Window: time.Minute}},
		{"10/s burst 20", portero.Limit{Count: 10, Window: time.Second, Burst: 20}},
		{"10 / sec  BURST 20", portero.Limit{Count: 10, Window: time.Second, Burst: 20}},
		{"5000/h", portero.Limit{Count: 5000, Window: time.Hour}},
		{"5000/hours", portero.Limit{Count: 5000, Window: time.Hour}},
		{"500000/d", portero.Limit{Count: 500000, Window: 24 * time.Hour}},
		{"500000/day", portero.PerDay(500000)},
		{"500000/DAY", portero.PerDay(500000)},
		{"100000/month", portero.PerMonth(100000)},
		{"10/week", portero.PerWeek(10)},
		{"500000/day tz Europe/Madrid", portero.PerDay(500000).WithZone("Europe/Madrid")},
		{"500000 / day  TZ America/New_York", portero.PerDay(500000).WithZone("America/New_York")},
		{"10/week offset 6d", portero.PerWeek(10).WithOffset(6 * 24 * time.Hour)},
		{"100000/month offset 14d9h tz Europe/Madrid", portero.PerMonth(100000).WithZone("Europe/Madrid").WithOffset(14*24*time.Hour + 9*time.Hour)},
		{"100000/month tz UTC offset 1d30m", portero.PerMonth(100000).WithZone("UTC").WithOffset(24*time.Hour + 30*time.Minute)},
		{"5/day offset 0s", portero.PerDay(5)},
		{"300/5m", portero.Limit{Count: 300, Window: 5 * time.Minute}},
		{"1/2s rate 0.5", portero.Limit{Count: 1, Window: 2 * time.Second, Rate: 0.5}},
		{"10/1m30s", portero.Limit{Count: 10, Window: 90 * time.Second}},
		{"1/2d", portero.Limit{Count: 1, Window: 48 * time.Hour}},
		// "d" before tz or offset can only be the calendar day.
		{"500000/d tz Europe/Madrid", portero.PerDay(500000).WithZone("Europe/Madrid")},
		{"10/D OFFSET 6h", portero.PerDay(10).WithOffset(6 * time.Hour)},
		{"10 / d offset 6h tz UTC", portero.PerDay(10).WithZone("UTC").WithOffset(6 * time.Hour)},
	}
	for _, tt := range tests {
		got, err := portero.ParseLimit(tt.in)
		if err != nil {
			t.Errorf("ParseLimit(%q) error %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseLimit(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		// String round-trips.
		again, err := portero.ParseLimit(got.String())
		if err != nil || again != got {
			t.Errorf("ParseLimit(%q.String() = %q) = %+v, %v; want %+v", tt.in, got.String(), again, err, got)
		}
	}
}

// TestParseLimitUnits reads every unit spelling, alone and after a count of
// units: "10/ms" was read as ten per minute (m + plural s) before the
// millisecond was tried, and "5/10min" was refused.
func TestParseLimitUnits(t *testing.T) {
	units := []struct {
		names []string
		d     time.Duration
	}{
		{[]string{"ms", "msec", "msecs", "millisecond", "milliseconds"}, time.Millisecond},
		{[]string{"s", "sec", "secs", "second", "seconds"}, time.Second},
		{[]string{"m", "min", "mins", "minute", "minutes"}, time.Minute},
		{[]string{"h", "hr", "hrs", "hour", "hours"}, time.Hour},
		{[]string{"d"}, 24 * time.Hour}, // day, week, month: calendar periods (TestParseLimit)
	}
	for _, u := range units {
		for _, name := range u.names {
			for _, n := range []int64{0, 1, 5, 250} {
				in, want := "10/"+name, u.d
				if n > 0 {
					in, want = fmt.Sprintf("10/%d%s", n, name), time.Duration(n)*u.d
				}
				for _, s := range []string{in, strings.ToUpper(in)} {
					got, err := portero.ParseLimit(s)
					if err != nil {
						t.Errorf("ParseLimit(%q) error %v", s, err)
						continue
					}
					if got.Window != want || got.Count != 10 {
						t.Errorf("ParseLimit(%q) = %+v, want 10 per %v", s, got, want)
					}
					again, err := portero.ParseLimit(got.String())
					if err != nil || again != got {
						t.Errorf("ParseLimit(%q.String() = %q) = %+v, %v; want %+v", s, got.String(), again, err, got)
					}
				}
			}
		}
	}
	for in, want := range map[string]time.Duration{
		"5/250ms": 250 * time.Millisecond, "100/5m": 5 * time.Minute, "5/10min": 10 * time.Minute,
		"5/10mins": 10 * time.Minute, "1/1.5s": 1500 * time.Millisecond, "3/90s": 90 * time.Second,
	} {
		if got, err := portero.ParseLimit(in); err != nil || got.Window != want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want window %v", in, got, err, want)
		}
	}
	// Windows that are no unit print as Go durations and read back.
	for _, w := range []time.Duration{time.Millisecond, 250 * time.Millisecond, 90 * time.Second, 48 * time.Hour, 1500 * time.Microsecond} {
		l := portero.Limit{Count: 1, Window: w}
		if got, err := portero.ParseLimit(l.String()); err != nil || got != l {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", l.String(), got, err, l)
		}
	}
}

func TestParseLimitErrors(t *testing.T) {
	tests := []struct{ in, mention string }{
		{"", "empty"},
		{"100", "missing \"/\""},
		{"0/min", "count 0"},
		{"-5/min", "count -5"},
		{"abc/min", "count \"abc\""},
		{"10/", "missing window"},
		{"10/fortnight", "window \"fortnight\""},
		{"10/5fortnights", "window \"5fortnights\""},
		{"10/99999999999d", "too long"},
		{"10/mss", "window \"mss\""},
		{"10/-1s", "window -1s"},
		{"10/0s", "window 0s"},
		{"10/s burst", "needs a value"},
		{"10/s burst 0", "burst \"0\""},
		{"10/s burst x", "burst \"x\""},
		{"10/s burst 5 burst 6", "twice"},
		{"10/s rate NaN", "rate \"nan\""},
		{"10/s rate +Inf", "rate \"+inf\""},
		{"10/s rate -1", "rate \"-1\""},
		{"10/s frobnicate 3", "unexpected \"frobnicate\""},
		{"10/1ns burst 2", "faster than one per nanosecond"},
		{"10/s burst 9223372036854775807", "292 years"},
		{"10/days", "a calendar period is one day"},
		{"10/2day", "a calendar period is one day"},
		{"10/3months", "write /month"},
		{"10/2d tz Europe/Madrid", "tz needs a calendar period"},
		{"10/d burst 5 tz UTC", "no burst or rate"},
		{"10/d tz", "needs a value"},
		{"10/24h offset 6h", "offset needs a calendar period"},
		{"10/day tz Nowhere/Else", "zone \"Nowhere/Else\""},
		{"10/day tz europe/madrid", "zone \"europe/madrid\""},
		{"10/day tz Local", "Local depends on the machine"},
		{"10/day tz UTC tz UTC", "tz given twice"},
		{"10/day offset 1h offset 1h", "offset given twice"},
		{"10/day offset 0s offset 1h", "offset given twice"},
		{"10/day offset 1d", "less than 1d"},
		{"10/week offset 7d", "less than 7d"},
		{"10/month offset 28d", "less than 28d"},
		{"10/day offset -1h", "offset \"-1h\""},
		{"10/day offset xd", "offset \"xd\""},
		{"10/day offset 1.5s", "whole seconds"},
		{"10/day burst 20", "no burst or rate"},
		{"10/month rate 1", "no burst or rate"},
		{"10/day tz", "needs a value"},
	}
	for _, tt := range tests {
		_, err := portero.ParseLimit(tt.in)
		if err == nil {
			t.Errorf("ParseLimit(%q) = nil error, want one mentioning %q", tt.in, tt.mention)
			continue
		}
		if !errors.Is(err, portero.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q) error %v does not wrap ErrInvalidLimit", tt.in, err)
		}
		if !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("ParseLimit(%q) error %q, want it to mention %q", tt.in, err, tt.mention)
		}
	}
}

func TestLimitValidate(t *testing.T) {
	bad := []portero.Limit{
		{},
		{Count: 1},
		{Window: time.Second},
		{Count: 1, Window: time.Second, Burst: -1},
		{Count: 1, Window: time.Second, Rate: math.NaN()},
		{Count: 1, Window: time.Second, Rate: math.Inf(1)},
		{Count: 1, Window: time.Second, Rate: -2},
		{Count: 1, Window: time.Second, Rate: 1e-300},
		{Count: 1, Window: time.Second, Rate: 2e9},
	}
	for _, l := range bad {
		if err := l.Validate(); !errors.Is(err, portero.ErrInvalidLimit) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidLimit", l, err)
		}
	}
	good := portero.PerSecond(10).WithBurst(20)
	if err := good.Validate(); err != nil {
		t.Errorf("%v.Validate() = %v", good, err)
	}
	if got, want := good.Capacity(), int64(20); got != want {
		t.Errorf("Capacity() = %d, want %d", got, want)
	}
	if got, want := good.Interval(), 100*time.Millisecond; got != want {
		t.Errorf("Interval() = %v, want %v", got, want)
	}
	if got, want := (portero.Limit{Count: 1, Window: time.Second, Rate: 0.5}).Interval(), 2*time.Second; got != want {
		t.Errorf("Interval() at 0.5/s = %v, want %v", got, want)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range portero.Algorithms {
		got, err := portero.ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %q, %v", a, got, err)
		}
	}
	if _, err := portero.ParseAlgorithm("leaky"); !errors.Is(err, portero.ErrUnknownAlgorithm) || !strings.Contains(err.Error(), "token-bucket") {
		t.Errorf("ParseAlgorithm(leaky) error %v, want ErrUnknownAlgorithm listing the names", err)
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"100/min", "10/s burst 20", "5000/h", "1/2s rate 0.5", "10/1m30s", "x/y", "10/s burst", " / ", "9/9ns rate 1e9",
		"10/ms", "5/250ms", "100/5m", "5/10min", "7/2d", "1/1ms burst 3", "10/1500us",
		"500000/day", "10/week offset 6d tz America/New_York", "100000/month offset 14d9h tz Europe/Madrid", "1/day offset 1d", "1/days"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := portero.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, portero.ErrInvalidLimit) {
				t.Fatalf("ParseLimit(%q) error %v does not wrap ErrInvalidLimit", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %+v which does not validate: %v", s, l, err)
		}
		again, err := portero.ParseLimit(l.String())
		if err != nil || again != l {
			t.Fatalf("round trip of %q via %q = %+v, %v; want %+v", s, l.String(), again, err, l)
		}
	})
}

// TestParseQuota reads every spelling of a calendar quota, "d" as the
// calendar day, and refuses a window of fixed length.
func TestParseQuota(t *testing.T) {
	madrid := portero.PerDay(500000).WithZone("Europe/Madrid")
	for in, want := range map[string]portero.Limit{
		"500000/day":                            portero.PerDay(500000),
		"500000/d":                              portero.PerDay(500000),
		"500000/D":                              portero.PerDay(500000),
		"500000 / d":                            portero.PerDay(500000),
		"500000/DAY":                            portero.PerDay(500000),
		"500000/d tz Europe/Madrid":             madrid,
		"500000/day tz Europe/Madrid":           madrid,
		"10/d offset 6h":                        portero.PerDay(10).WithOffset(6 * time.Hour),
		"10/week":                               portero.PerWeek(10),
		"10/Week offset 6d tz America/New_York": portero.PerWeek(10).WithOffset(6 * 24 * time.Hour).WithZone("America/New_York"),
		"100000/month":                          portero.PerMonth(100000),
		"100000/month offset 14d9h tz Europe/Madrid": portero.PerMonth(100000).WithOffset(14*24*time.Hour + 9*time.Hour).WithZone("Europe/Madrid"),
	} {
		got, err := portero.ParseQuota(in)
		if err != nil || got != want {
			t.Errorf("ParseQuota(%q) = %+v, %v; want %+v", in, got, err, want)
			continue
		}
		if again, err := portero.ParseQuota(got.String()); err != nil || again != got {
			t.Errorf("ParseQuota(%q.String() = %q) = %+v, %v; want %+v", in, got.String(), again, err, got)
		}
	}
	// ParseLimit keeps "d" a 24-hour window where it stands alone.
	if l, err := portero.ParseLimit("500000/d"); err != nil || l.IsCalendar() || l.Window != 24*time.Hour {
		t.Errorf("ParseLimit(500000/d) = %+v, %v; want a window of 24 hours", l, err)
	}
	for _, tt := range []struct{ in, mention string }{
		{"1000/24h", "a quota is per calendar day, week or month"},
		{"10/h", "a quota is per calendar day, week or month"},
		{"10/2d", "a quota is per calendar day, week or month"},
		{"10/s burst 20", "a quota is per calendar day, week or month"},
		{"", "empty"},
		{"0/d", "count 0"},
		{"10/days", "a calendar period is one day"},
		{"10/d burst 5", "no burst or rate"},
		{"10/d rate 1", "no burst or rate"},
		{"10/d tz Nowhere/Else", "zone \"Nowhere/Else\""},
		{"10/d offset 1d", "less than 1d"},
		{"10/2d tz UTC", "tz needs a calendar period"},
	} {
		l, err := portero.ParseQuota(tt.in)
		if err == nil {
			t.Errorf("ParseQuota(%q) = %+v, want an error mentioning %q", tt.in, l, tt.mention)
			continue
		}
		if !errors.Is(err, portero.ErrInvalidLimit) || !strings.Contains(err.Error(), tt.mention) || !strings.Contains(err.Error(), strconv.Quote(tt.in)) {
			t.Errorf("ParseQuota(%q) error %q, want it to wrap ErrInvalidLimit, quote the input and mention %q", tt.in, err, tt.mention)
		}
	}
}

func FuzzParseQuota(f *testing.F) {
	for _, s := range []string{"500000/day", "500000/d", "5/d tz Europe/Madrid", "10/week offset 6d tz America/New_York", "1000/24h", "10/h", "1/d burst 2", "x/d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := portero.ParseQuota(s)
		l, lerr := portero.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, portero.ErrInvalidLimit) {
				t.Fatalf("ParseQuota(%q) error %v does not wrap ErrInvalidLimit", s, err)
			}
			if lerr == nil && l.IsCalendar() {
				t.Fatalf("ParseQuota(%q) error %v, but ParseLimit reads the calendar quota %v", s, err, l)
			}
			return
		}
		if !q.IsCalendar() || q.Validate() != nil {
			t.Fatalf("ParseQuota(%q) = %+v: not a valid calendar quota", s, q)
		}
		if lerr == nil && l.IsCalendar() && l != q {
			t.Fatalf("ParseQuota(%q) = %+v, ParseLimit %+v", s, q, l)
		}
		if again, err := portero.ParseQuota(q.String()); err != nil || again != q {
			t.Fatalf("round trip of %q via %q = %+v, %v; want %+v", s, q.String(), again, err, q)
		}
	})
}

func ExampleParseQuota() {
	q, err := portero.ParseQuota("500000/d tz Europe/Madrid")
	if err != nil {
		panic(err)
	}
	_, err = portero.ParseQuota("1000/24h")
	fmt.Println(q, q.Period)
	fmt.Println(err)
	// Output:
	// 500000/day tz Europe/Madrid day
	// invalid limit: "1000/24h": a quota is per calendar day, week or month, such as 500000/day, 500000/d or 100000/month
}

func ExampleParseLimit() {
	l, err := portero.ParseLimit("10/s burst 20")
	if err != nil {
		panic(err)
	}
	fmt.Println(l, l.Capacity(), l.Interval())
	// Output: 10/s burst 20 20 100ms
}
