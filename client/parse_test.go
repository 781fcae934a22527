package client

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const base, cap = 500 * time.Millisecond, 10 * time.Second
	want := []time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for n, w := range want {
		if got := Backoff(n, base, cap); got != w {
			t.Errorf("Backoff(%d, 0.5s, 10s) = %v, want %v", n, got, w)
		}
	}
	if got := Backoff(1000, base, cap); got != cap {
		t.Errorf("Backoff(1000) = %v, want the cap %v", got, cap)
	}
	if got := Backoff(1000, time.Second, 1<<62); got <= 0 {
		t.Errorf("Backoff(1000, 1s, huge cap) = %v, want a positive duration (no overflow)", got)
	}
	// The herd experiment's: base 1 s gives 1, 2, 4 s.
	for n, w := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second} {
		if got := Backoff(n, time.Second, cap); got != w {
			t.Errorf("Backoff(%d, 1s, 10s) = %v, want %v", n, got, w)
		}
	}
}

func TestFullJitter(t *testing.T) {
	for _, tc := range []struct {
		u    float64
		want time.Duration
	}{{0, 0}, {-1, 0}, {0.25, time.Second}, {0.999999999, 3999999996 * time.Nanosecond}, {1, 4 * time.Second}, {7, 4 * time.Second}} {
		if got := FullJitter(4*time.Second, tc.u); got != tc.want {
			t.Errorf("FullJitter(4s, %v) = %v, want %v", tc.u, got, tc.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	ref := time.Date(1994, 11, 6, 8, 49, 30, 0, time.UTC)
	huge := time.Duration(maxDelaySeconds) * time.Second
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 120 * time.Second, true},
		{"0", 0, true},
		{" 5\t", 5 * time.Second, true},
		{"007", 7 * time.Second, true},
		{"Sun, 06 Nov 1994 08:49:37 GMT", 7 * time.Second, true},  // IMF-fixdate
		{"Sunday, 06-Nov-94 08:49:37 GMT", 7 * time.Second, true}, // RFC 850
		{"Sun Nov  6 08:49:37 1994", 7 * time.Second, true},       // asctime
		{"Sun, 06 Nov 1994 08:49:00 GMT", 0, true},                // in the past: retry now
		{"99999999999999999999999", huge, true},                   // overflow clamps
		{"9223372037", huge, true},
		{"", 0, false},
		{"-1", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"1 2", 0, false},
		{"soon", 0, false},
		{"Sun, 06 Nov 1994 08:49:37 PST", 0, false},
		{"Sunday, 06-Nov-94 08:49:37 PST", 0, false},
		{"sun, 06 nov 1994 08:49:37 gmt", 0, false},
		{"2026-05-01T00:00:00Z", 0, false},
	} {
		got, ok := ParseRetryAfter(tc.in, ref)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v, want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseRetryAfterTwoDigitYear(t *testing.T) {
	// RFC 9110 §5.6.7: a timestamp that appears to be more than 50 years in
	// the future is the most recent past year with those two digits. The
	// rule is about the timestamp, not only the year: from 1 June 2026,
	// 1 December 2076 is 50.5 years ahead, so it is 1976.
	ref := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"Thursday, 01-Jan-70 00:00:10 GMT", time.Date(2070, 1, 1, 0, 0, 10, 0, time.UTC), true},  // 43.6 years ahead: future
		{"Saturday, 01-Jan-99 00:00:10 GMT", time.Date(1999, 1, 1, 0, 0, 10, 0, time.UTC), true},  // 2099 would be 72.6 years ahead
		{"Monday, 01-Jun-26 12:00:10 GMT", time.Date(2026, 6, 1, 12, 0, 10, 0, time.UTC), true},   // ref's own year
		{"Tuesday, 01-Dec-76 00:00:00 GMT", time.Date(1976, 12, 1, 0, 0, 0, 0, time.UTC), true},   // 50.5 years ahead: the past
		{"Monday, 01-Jun-76 12:00:00 GMT", time.Date(2076, 6, 1, 12, 0, 0, 0, time.UTC), true},    // exactly 50 years ahead: not more
		{"Monday, 01-Jun-76 12:00:01 GMT", time.Date(1976, 6, 1, 12, 0, 1, 0, time.UTC), true},    // one second more than 50 years
		{"Sunday, 01-Jan-23 00:00:00 GMT", time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC), true},     // the recent past stays in this century
		{"Tuesday, 29-Feb-00 00:00:00 GMT", time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC), true},   // 2000 was a leap year
		{"Friday, 05-Aug-55 09:27:05 GMT", time.Date(2055, 8, 5, 9, 27, 5, 0, time.UTC), true},    // 29 years ahead
		{"Wednesday, 05-Aug-81 09:27:05 GMT", time.Date(1981, 8, 5, 9, 27, 5, 0, time.UTC), true}, // 55 years ahead: the past
	} {
		tm, ok := parseHTTPDate(tc.in, ref)
		if ok != tc.ok || !tm.Equal(tc.want) {
			t.Errorf("parseHTTPDate(%q, 2026-06-01) = %v, %v, want %v, %v", tc.in, tm, ok, tc.want, tc.ok)
		}
	}
	// Late in a century the window reaches into the next one: from 2090,
	// "30" is 2130 (40 years ahead), not 2030 (60 years ago); and 29 February
	// of a year that resolves to 2100, not a leap year, is no date at all.
	late := time.Date(2090, 1, 1, 0, 0, 0, 0, time.UTC)
	if tm, ok := parseHTTPDate("Friday, 01-Mar-30 00:00:00 GMT", late); !ok || tm.Year() != 2130 {
		t.Errorf("parseHTTPDate(\"01-Mar-30\", 2090) = %v, %v, want 2130", tm, ok)
	}
	if tm, ok := parseHTTPDate("Monday, 29-Feb-00 00:00:00 GMT", late); ok {
		t.Errorf("parseHTTPDate(\"29-Feb-00\", 2090) = %v, true, want false: 2100 has no 29 February", tm)
	}
	if d, ok := ParseRetryAfter("Monday, 01-Jun-26 12:00:10 GMT", ref); !ok || d != 10*time.Second {
		t.Errorf("ParseRetryAfter(RFC 850 in 2026) = %v, %v, want 10s, true", d, ok)
	}
}

func TestRetryAfterUsesDateField(t *testing.T) {
	// The server's clock is an hour ahead of ours: the date form must be
	// measured against its Date field, not our clock.
	received := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	server := received.Add(time.Hour)
	h := http.Header{}
	h.Set("Date", server.Format(http.TimeFormat))
	h.Set("Retry-After", server.Add(4*time.Second).Format(http.TimeFormat))
	if d, ok := RetryAfter(h, received); !ok || d != 4*time.Second {
		t.Errorf("RetryAfter(date with skewed Date) = %v, %v, want 4s, true", d, ok)
	}
	h.Del("Date") // without Date, our own clock is the reference
	if d, ok := RetryAfter(h, received); !ok || d != time.Hour+4*time.Second {
		t.Errorf("RetryAfter(date without Date) = %v, %v, want 1h0m4s, true", d, ok)
	}
	h.Set("Date", "garbage") // an unparsable Date is ignored
	if d, ok := RetryAfter(h, received); !ok || d != time.Hour+4*time.Second {
		t.Errorf("RetryAfter(date with bad Date) = %v, %v, want 1h0m4s, true", d, ok)
	}
	two := http.Header{"Retry-After": {"1", "2"}}
	if d, ok := RetryAfter(two, received); ok {
		t.Errorf("RetryAfter(two field lines) = %v, true, want ok == false", d)
	}
	if d, ok := RetryAfter(http.Header{}, received); ok {
		t.Errorf("RetryAfter(absent) = %v, true, want ok == false", d)
	}
}

func TestParsePolicies(t *testing.T) {
	got, err := ParsePolicies([]string{`"burst";q=100;w=60,"daily";q=1000;w=86400`, `"peruser";q=65535;qu="content-bytes";w=10;pk=:cHsdsRa894==:;acme-x=1`})
	if err != nil {
		t.Fatal(err)
	}
	pk := []byte{0x70, 0x7b, 0x1d, 0xb1, 0x16, 0xbc, 0xf7} // :cHsdsRa894==:
	want := []Policy{
		{Name: "burst", Quota: 100, Unit: "requests", Window: time.Minute},
		{Name: "daily", Quota: 1000, Unit: "requests", Window: 24 * time.Hour},
		{Name: "peruser", Quota: 65535, Unit: "content-bytes", Window: 10 * time.Second, PartitionKey: pk},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParsePolicies = %+v, want %+v", got, want)
	}
	if got, err := ParsePolicies(nil); got != nil || err != nil {
		t.Errorf("ParsePolicies(nil) = %v, %v, want nil, nil", got, err)
	}
	for _, bad := range []string{
		`default;q=100;w=10`,     // token, not string (-11 requires String)
		`"d";w=10`,               // q missing
		`"d";q=-1`,               // negative q
		`"d";q=1.5`,              // decimal q
		`"d";q=10;w=0`,           // w must be > 0
		`"d";q=10;w="10"`,        // w not integer
		`"d";q=10;qu=requests`,   // qu not a string
		`"d";q=10;pk="abc"`,      // pk not a byte sequence
		`("d");q=10`,             // inner list
		`"d";q=10,`,              // trailing comma
		`"d";Q=10`,               // uppercase key
		`"d";q=1000000000000000`, // 16 digits
		`"unterminated;q=10`,     //
		`"d";q=10;w=10;pk=:!!!:`, // bad base64
		"\"d\";q=10\x00",         // control character
		`"d";q=10 "e";q=1`,       // missing comma
	} {
		if got, err := ParsePolicies([]string{bad}); !errors.Is(err, ErrMalformedField) {
			t.Errorf("ParsePolicies(%q) = %+v, %v, want ErrMalformedField", bad, got, err)
		}
	}
}

func TestParseLimits(t *testing.T) {
	got, err := ParseLimits([]string{`"default";r=50;t=30`, `"day";r=0;pk=:QXBwLTk5OQ==:`})
	if err != nil {
		t.Fatal(err)
	}
	want := []Limit{
		{Name: "default", Remaining: 50, Window: 30 * time.Second, HasWindow: true},
		{Name: "day", Remaining: 0, PartitionKey: []byte("App-999")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseLimits = %+v, want %+v", got, want)
	}
	huge, err := ParseLimits([]string{`"x";r=1;t=999999999999999`})
	if err != nil || huge[0].Window != time.Duration(maxDelaySeconds)*time.Second {
		t.Errorf("ParseLimits(huge t) = %+v, %v, want t clamped to the Duration range", huge, err)
	}
	for _, bad := range []string{`"d";t=5`, `"d";r=-1`, `"d";r=5;t=-1`, `"d";r=5;t=1.0`, `d;r=5`, `"d";r=5;pk=1`, `"d";r=5;;`} {
		if got, err := ParseLimits([]string{bad}); !errors.Is(err, ErrMalformedField) {
			t.Errorf("ParseLimits(%q) = %+v, %v, want ErrMalformedField", bad, got, err)
		}
	}
}
