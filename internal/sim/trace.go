package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Epoch is the instant that time zero of a trace maps to: the Unix epoch, so
// trace second s is Epoch.Add(s). Clock-aligned windows of any whole number
// of nanoseconds dividing a day start at multiples of their length since
// Epoch, so a fixed window of W seconds starts at trace times 0, W, 2W, ….
var Epoch = time.Unix(0, 0)

// Request is one line of a trace: a request of Cost units from Key arriving
// At after the start of the trace.
type Request struct {
	At   time.Duration
	Key  string
	Cost int64
	// Line is the line of the trace file the request came from (1-based), or
	// 0 for a generated request; errors about the request name it.
	Line int
}

// TraceError reports a malformed trace line.
type TraceError struct {
	Line int // 1-based line number
	Err  error
}

func (e *TraceError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *TraceError) Unwrap() error { return e.Err }

// ErrMalformedTrace is wrapped by every error that ParseTrace returns for
// bad input, so callers can tell bad input from a failing reader.
var ErrMalformedTrace = errors.New("malformed trace")

func lineErr(line int, format string, args ...any) error {
	return &TraceError{Line: line, Err: fmt.Errorf("%w: "+format, append([]any{ErrMalformedTrace}, args...)...)}
}

// ParseTrace reads a whole trace in CSV, one request per line:
//
//	time,key[,cost]
//
// time is in decimal seconds since the start of the trace (such as 0, 1.5 or
// 0.000000001: at most nine decimals, no sign, no exponent) and never
// decreases from one line to the next; key is any non-empty string (quoted
// as in CSV if it holds a comma); cost is a whole number of at least 1 and
// defaults to 1. The first line may be a header whose first field is "time".
// Blank lines and lines starting with '#' are skipped.
//
// It parses the whole input before returning, so a caller can refuse a trace
// without having acted on any of it. Errors for bad input are *TraceError
// naming the line and wrap ErrMalformedTrace.
func ParseTrace(r io.Reader) ([]Request, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // checked here, to say what was expected
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	var (
		out   []Request
		last  time.Duration
		first = true
	)
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, lineErr(pe.Line, "%v", pe.Err)
			}
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // a line of spaces
		}
		header := first && strings.EqualFold(strings.TrimSpace(rec[0]), "time")
		first = false
		if header {
			continue
		}
		if len(rec) != 2 && len(rec) != 3 {
			return nil, lineErr(line, "%d fields, want time,key[,cost]", len(rec))
		}
		at, err := ParseSeconds(strings.TrimSpace(rec[0]))
		if err != nil {
			return nil, lineErr(line, "time %q: %v", rec[0], err)
		}
		if at < last {
			return nil, lineErr(line, "time %s goes back before %s", FormatSeconds(at), FormatSeconds(last))
		}
		last = at
		key := strings.TrimSpace(rec[1])
		if key == "" {
			return nil, lineErr(line, "empty key")
		}
		cost := int64(1)
		if len(rec) == 3 {
			c := strings.TrimSpace(rec[2])
			cost, err = strconv.ParseInt(c, 10, 64)
			if err != nil {
				return nil, lineErr(line, "cost %q: not a whole number", c)
			}
			if cost <= 0 {
				return nil, lineErr(line, "cost %d: must be at least 1", cost)
			}
		}
		out = append(out, Request{At: at, Key: key, Cost: cost, Line: line})
	}
}

// ParseSeconds reads a non-negative decimal number of seconds, such as "2",
// "0.5" or "1.000000001", exactly into a Duration. More than nine decimals
// (finer than a nanosecond) is an error unless the extra digits are zeros,
// and so is a value beyond the range of a Duration (about 292 years). It
// reads bytes as well as a string, without copying them (a log line's
// field).
func ParseSeconds[T string | []byte](s T) (time.Duration, error) {
	var sec, ns int64
	i, digits := 0, 0
	for ; i < len(s) && s[i] != '.'; i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errNotSeconds
		}
		if sec = sec*10 + int64(s[i]-'0'); sec > math.MaxInt64/int64(time.Second) {
			return 0, errTooManySeconds
		}
	}
	if i == 0 && len(s) <= 1 { // "" or "."
		return 0, errors.New("not a number of seconds")
	}
	for i++; i < len(s); i++ {
		switch c := s[i]; {
		case c < '0' || c > '9':
			return 0, errNotSeconds
		case digits == 9 && c != '0':
			return 0, errors.New("finer than a nanosecond")
		case digits < 9:
			ns, digits = ns*10+int64(c-'0'), digits+1
		}
	}
	for ; digits < 9; digits++ {
		ns *= 10
	}
	total := sec*int64(time.Second) + ns
	if total < 0 { // overflow in the last second of the range
		return 0, errTooManySeconds
	}
	return time.Duration(total), nil
}

var (
	errNotSeconds     = errors.New("not a decimal number of seconds (digits and one '.', no sign or exponent)")
	errTooManySeconds = errors.New("too large (at most about 292 years)")
)

// FormatSeconds formats d as decimal seconds, exactly and minimally: "0",
// "0.5", "1.000000001", "-0.25". It is the inverse of ParseSeconds.
func FormatSeconds(d time.Duration) string {
	ns := int64(d)
	sign := ""
	u := uint64(ns)
	if ns < 0 {
		sign = "-"
		u = uint64(-(ns + 1)) + 1 // also for math.MinInt64
	}
	sec, frac := u/1e9, u%1e9
	if frac == 0 {
		return sign + strconv.FormatUint(sec, 10)
	}
	f := strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
	return sign + strconv.FormatUint(sec, 10) + "." + f
}
