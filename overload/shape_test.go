package overload

import (
	"testing"
	"time"
)

func TestShapeHold(t *testing.T) {
	const i = 500 * time.Millisecond
	for _, tc := range []struct {
		s           Shape
		delay, want time.Duration
	}{
		{Shape{}, 2500 * time.Millisecond, 2500 * time.Millisecond}, // pure shaping: until departure
		{Shape{Delay: 2}, 500 * time.Millisecond, 0},                // the first places pass at once
		{Shape{Delay: 2}, time.Second, 0},
		{Shape{Delay: 2}, 1500 * time.Millisecond, 500 * time.Millisecond}, // then one interval apart
		{Shape{Delay: 2}, 2500 * time.Millisecond, 1500 * time.Millisecond},
		{Shape{Delay: 10}, 2500 * time.Millisecond, 0},
	} {
		if got := tc.s.Hold(tc.delay, i); got != tc.want {
			t.Errorf("%+v.Hold(%v, %v) = %v, want %v", tc.s, tc.delay, i, got, tc.want)
		}
	}
	for _, tc := range []struct {
		s           Shape
		left        time.Duration
		hasDeadline bool
		want        time.Duration
		ok          bool
	}{
		{Shape{}, 0, false, 0, false},
		{Shape{}, time.Second, true, time.Second, true},
		{Shape{MaxDelay: 2 * time.Second}, 0, false, 2 * time.Second, true},
		{Shape{MaxDelay: 2 * time.Second}, time.Second, true, time.Second, true},
		{Shape{MaxDelay: time.Second}, 3 * time.Second, true, time.Second, true},
	} {
		if got, ok := tc.s.Bound(tc.left, tc.hasDeadline); got != tc.want || ok != tc.ok {
			t.Errorf("%+v.Bound(%v, %v) = %v, %v; want %v, %v", tc.s, tc.left, tc.hasDeadline, got, ok, tc.want, tc.ok)
		}
	}
	for _, bad := range []Shape{{Delay: -1}, {MaxDelay: -time.Second}} {
		if bad.Validate() == nil {
			t.Errorf("%+v.Validate() = nil", bad)
		}
	}
	if (Shape{Delay: 3, MaxDelay: time.Second}).Validate() != nil {
		t.Error("a valid Shape is refused")
	}
}
