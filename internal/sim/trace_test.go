package sim

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"10", 10 * time.Second},
		{"0.5", 500 * time.Millisecond},
		{".5", 500 * time.Millisecond},
		{"1.", time.Second},
		{"1.000000001", time.Second + 1},
		{"0.1000000000", 100 * time.Millisecond}, // zeros past the ns are fine
		{"007.25", 7250 * time.Millisecond},
		{"9223372036.854775807", time.Duration(1<<63 - 1)},
	} {
		got, err := ParseSeconds(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSeconds(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", ".", "-1", "+1", "1e3", "0x10", "1.2.3", "1,5", " 1", "1s", "0.0000000001", "9223372036.854775808", "99999999999999999999", "NaN", "inf"} {
		if got, err := ParseSeconds(in); err == nil {
			t.Errorf("ParseSeconds(%q) = %v, nil, want an error", in, got)
		}
	}
}

func TestFormatSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0"},
		{500 * time.Millisecond, "0.5"},
		{3 * time.Second, "3"},
		{time.Second + 1, "1.000000001"},
		{1250 * time.Millisecond, "1.25"},
		{-250 * time.Millisecond, "-0.25"},
		{time.Duration(1<<63 - 1), "9223372036.854775807"},
		{time.Duration(-1 << 63), "-9223372036.854775808"},
	} {
		if got := FormatSeconds(tc.in); got != tc.want {
			t.Errorf("FormatSeconds(%d) = %q, want %q", int64(tc.in), got, tc.want)
		}
	}
	// It agrees with strconv's shortest 'f' formatting wherever float64 is
	// exact enough, and round-trips through ParseSeconds.
	for _, ns := range []int64{1, 10, 999, 1e6, 123456789, 1e9 + 5e8, 42e9} {
		d := time.Duration(ns)
		if got, want := FormatSeconds(d), strconv.FormatFloat(d.Seconds(), 'f', -1, 64); got != want {
			t.Errorf("FormatSeconds(%d) = %q, strconv says %q", ns, got, want)
		}
		if back, err := ParseSeconds(FormatSeconds(d)); err != nil || back != d {
			t.Errorf("ParseSeconds(FormatSeconds(%d)) = %v, %v", ns, back, err)
		}
	}
}

func TestParseTrace(t *testing.T) {
	in := "time,key,cost\n" +
		"0,a\n" +
		"\n" +
		"# a comment\n" +
		"0.5, b ,3\n" +
		"   \n" +
		"0.5,\"x,y\",1\n" +
		"10,a,2\n"
	got, err := ParseTrace(strings.NewReader(in))
	if err != nil {
		t.Fatalf("ParseTrace: %v", err)
	}
	want := []Request{
		{At: 0, Key: "a", Cost: 1, Line: 2},
		{At: 500 * time.Millisecond, Key: "b", Cost: 3, Line: 5},
		{At: 500 * time.Millisecond, Key: "x,y", Cost: 1, Line: 7},
		{At: 10 * time.Second, Key: "a", Cost: 2, Line: 8},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParseTrace =\n%v\nwant\n%v", got, want)
	}

	// Without a header, the first line is a request.
	got, err = ParseTrace(strings.NewReader("1,k\n"))
	if err != nil || len(got) != 1 || got[0].At != time.Second || got[0].Line != 1 {
		t.Errorf("ParseTrace(no header) = %v, %v, want one request at 1s on line 1", got, err)
	}
	// An empty trace is no requests, not an error.
	if got, err := ParseTrace(strings.NewReader("")); err != nil || len(got) != 0 {
		t.Errorf("ParseTrace(\"\") = %v, %v, want none", got, err)
	}
}

func TestParseTraceErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		line     int
		msg      string
	}{
		{"bad time", "time,key\n0,a\nsoon,a\n", 3, `time "soon"`},
		{"negative time", "-1,a\n", 1, "time"},
		{"decreasing", "0,a\n2,a\n1.5,a\n", 3, "goes back before 2"},
		{"zero cost", "0,a\n0,a,0\n", 2, "cost 0"},
		{"negative cost", "0,a,-2\n", 1, "cost -2"},
		{"bad cost", "0,a,1.5\n", 1, `cost "1.5"`},
		{"one column", "0,a\n1\n", 2, "1 fields"},
		{"four columns", "0,a,1,x\n", 1, "4 fields"},
		{"empty key", "0,,1\n", 1, "empty key"},
		{"header not first", "0,a\ntime,key\n", 2, `time "time"`},
		{"bare quote", "0,a\"b\n", 1, "quote"},
		{"too fine", "0.0000000001,a\n", 1, "finer than a nanosecond"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTrace(strings.NewReader(tc.in))
			var te *TraceError
			if !errors.As(err, &te) || !errors.Is(err, ErrMalformedTrace) {
				t.Fatalf("ParseTrace(%q) = %v, %v, want a *TraceError wrapping ErrMalformedTrace", tc.in, got, err)
			}
			if got != nil {
				t.Errorf("ParseTrace(%q) returned %d requests with the error, want none", tc.in, len(got))
			}
			if te.Line != tc.line || !strings.Contains(err.Error(), fmt.Sprintf("line %d:", tc.line)) {
				t.Errorf("error %q names line %d, want line %d", err, te.Line, tc.line)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not mention %q", err, tc.msg)
			}
		})
	}
}

// formatTrace writes a trace in the format ParseTrace reads.
func formatTrace(tr []Request) string {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"time", "key", "cost"})
	for _, r := range tr {
		w.Write([]string{FormatSeconds(r.At), r.Key, strconv.FormatInt(r.Cost, 10)})
	}
	w.Flush()
	return b.String()
}

func FuzzParseTrace(f *testing.F) {
	f.Add("time,key,cost\n0,a\n0.5,b,2\n")
	f.Add("0,a\n1.000000001,\"x,y\",3\n")
	f.Add("# c\n\n1,a\n0,a\n")
	f.Add("0,a,0\n")
	f.Add("1e3,a\n")
	f.Add("0,a\"\n")
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := ParseTrace(strings.NewReader(in))
		if err != nil {
			var te *TraceError
			if !errors.As(err, &te) || te.Line < 1 || !errors.Is(err, ErrMalformedTrace) {
				t.Fatalf("ParseTrace(%q) error %v: want a *TraceError with a line, wrapping ErrMalformedTrace", in, err)
			}
			if tr != nil {
				t.Fatalf("ParseTrace(%q) returned requests with its error", in)
			}
			return
		}
		var last time.Duration
		for i, r := range tr {
			if r.At < last || r.Cost < 1 || r.Key == "" || r.Line < 1 {
				t.Fatalf("ParseTrace(%q)[%d] = %+v: out of order or invalid", in, i, r)
			}
			last = r.At
		}
		// What it accepted, written back, reads the same.
		again, err := ParseTrace(strings.NewReader(formatTrace(tr)))
		if err != nil {
			t.Fatalf("re-parsing %q: %v", formatTrace(tr), err)
		}
		if len(again) != len(tr) {
			t.Fatalf("re-parsed %d requests, want %d", len(again), len(tr))
		}
		for i := range tr {
			a, b := tr[i], again[i]
			if a.At != b.At || a.Key != b.Key || a.Cost != b.Cost {
				t.Fatalf("request %d: %+v, re-parsed %+v", i, a, b)
			}
		}
	})
}
