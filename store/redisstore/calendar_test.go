package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// The boundaries sent to the script are the two periods nearest the clock:
// the one before and the current one in the first half of a period, the
// current one and the next in the second half, cached for that half.
// Madrid's 31 March 2024 is the 23-hour day [23:00Z on the 30th, 22:00Z on
// the 31st); its middle is 10:30Z.
func TestCalendarArgs(t *testing.T) {
	c := &calendar{limit: portero.PerDay(7).WithZone("Europe/Madrid")}
	sec := func(s string) string { return strconv.FormatInt(utc(s).Unix(), 10) }
	spans := func(d1, d2 time.Duration) string {
		return strconv.FormatInt(int64(d1/time.Second)+int64(d2/time.Second)<<22, 10)
	}
	tests := []struct {
		now  string
		want [3]string
	}{
		{"2024-03-30T23:00:00Z", [3]string{"7", sec("2024-03-29T23:00:00Z"), spans(24*time.Hour, 23*time.Hour)}},
		{"2024-03-31T10:29:59.999999999Z", [3]string{"7", sec("2024-03-29T23:00:00Z"), spans(24*time.Hour, 23*time.Hour)}},
		{"2024-03-31T10:30:00Z", [3]string{"7", sec("2024-03-30T23:00:00Z"), spans(23*time.Hour, 24*time.Hour)}},
		{"2024-03-31T21:59:59.999999999Z", [3]string{"7", sec("2024-03-30T23:00:00Z"), spans(23*time.Hour, 24*time.Hour)}},
		{"2024-03-31T22:00:00Z", [3]string{"7", sec("2024-03-30T23:00:00Z"), spans(23*time.Hour, 24*time.Hour)}},
		{"2024-10-27T00:00:00Z", [3]string{"7", sec("2024-10-25T22:00:00Z"), spans(24*time.Hour, 25*time.Hour)}},
	}
	for _, tt := range tests {
		if got := *c.args(utc(tt.now)); got != tt.want {
			t.Errorf("args(%s) = %q, want %q", tt.now, got, tt.want)
		}
	}
	// The last answer serves its half period without being computed again.
	a := c.args(utc("2024-10-27T01:00:00Z"))
	if b := c.args(utc("2024-10-27T09:00:00Z")); a != b {
		t.Errorf("args within one half period computed twice")
	}
}

// With Redis's own clock the script counts in the period Redis's instant
// falls in, among the two it is given, and fails, counting nothing, when
// the instant is outside both (clocks half a period apart). The periods
// are placed around Redis TIME, so the test waits for nothing.
func TestCalendarServerClockPicksPeriod(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Config{URL: srv.URL(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	client := s.conn.Load().client
	tm, err := client.Do(ctx, client.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	T, _ := strconv.ParseInt(tm[0], 10, 64)
	run := func(key string, x0, x1, x2 int64, driver bool) ([]int64, error) {
		spans := strconv.FormatInt((x1-x0)+(x2-x1)<<22, 10)
		args := []string{"server", "0", "0", "1", "0", string(calendarAlg), "1", "3", strconv.FormatInt(x0, 10), spans}
		script := s.scripts.hit[calendarAlg]
		if driver {
			script = s.scripts.all
		}
		return script.Exec(ctx, client, []string{"calendar-test:" + key}, args).AsIntSlice()
	}
	check := func(name string, res []int64, err error, end int64) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// One hit: all-allowed, then allowed, remaining, retry, reset, left.
		if len(res) != 6 || res[1] != 1 || res[2] != 2 {
			t.Fatalf("%s: reply %v, want allowed with 2 remaining", name, res)
		}
		// Redis's instant is between T and T+10 s: the period's end is
		// end − T s away, less up to 10 s.
		if left := res[5]; left > (end-T)*1e9 || left <= (end-T-10)*1e9 {
			t.Errorf("%s: %v left in the period, want just under %d s (it ends at T%+d s)", name, time.Duration(left), end-T, end-T)
		}
	}
	for _, driver := range []bool{false, true} {
		res, err := run("first", T-100, T+50, T+100, driver)
		check("TIME in the first period", res, err, T+50)
		res, err = run("second", T-100, T-50, T+100, driver)
		check("TIME in the second period", res, err, T+100)
		// The state keeps its period: a later call whose periods have
		// moved on still counts in it.
		res, err = run("second", T-1000, T-500, T+100, driver)
		if err != nil || res[2] != 1 {
			t.Errorf("second call on one period: %v, %v; want 1 remaining", res, err)
		}
		for _, x := range [][3]int64{{T + 50, T + 60, T + 70}, {T - 300, T - 200, T - 100}} {
			res, err = run("outside", x[0], x[1], x[2], driver)
			if err == nil || !strings.Contains(err.Error(), "outside the periods") {
				t.Errorf("periods [T%+d, T%+d) around TIME: %v, %v; want an error saying the clocks differ", x[0]-T, x[2]-T, res, err)
			}
		}
		if n, _ := client.Do(ctx, client.B().Exists().Key("calendar-test:outside").Build()).AsInt64(); n != 0 {
			t.Errorf("a failed call wrote state")
		}
		client.Do(ctx, client.B().Del().Key("calendar-test:first", "calendar-test:second").Build())
	}
}

// End to end with ServerClock: three of a quota of three pass, the fourth
// is refused until the end of the day (Redis's clock and this process's
// are one machine's).
func TestCalendarServerClockStore(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Config{URL: srv.URL(), Timeout: 10 * time.Second, Prefix: "cal:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	rule := portero.Rule{Name: "quota", Algorithm: portero.FixedWindow, Limit: portero.PerDay(3).WithZone("Pacific/Kiritimati")}
	hit := []portero.Hit{{Rule: rule, Key: "k", Cost: 1}}
	for i := range 5 {
		now := time.Now()
		ds, err := s.AllowAll(context.Background(), now, hit)
		if err != nil {
			t.Fatal(err)
		}
		d := ds[0]
		_, end := rule.Limit.PeriodAt(now)
		if d.Allowed != (i < 3) || !d.Quota || d.Remaining != max(0, 2-int64(i)) {
			t.Fatalf("call %d: %+v, want allowed %v, a quota, %d remaining", i, d, i < 3, max(0, 2-i))
		}
		if got := now.Add(d.PeriodLeft); got.Sub(end).Abs() > 5*time.Second {
			t.Errorf("call %d: the period ends at %v by Redis, %v by the calendar", i, got, end)
		}
		if !d.Allowed && d.RetryAfter != d.PeriodLeft {
			t.Errorf("call %d: refused with RetryAfter %v, PeriodLeft %v: want the end of the period", i, d.RetryAfter, d.PeriodLeft)
		}
	}
}
