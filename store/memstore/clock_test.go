package memstore_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
)

// With ClockResolution the store's clock is behind the monotonic clock by
// at most the resolution (the refresher runs on time in a synctest bubble),
// never ahead, never going back; decisions take it; after a hundred unused
// readings the refresher sleeps and the clock is read exactly until it has
// woken; Close stops it (synctest.Test fails on a goroutine left running).
func TestCoarseClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const res = time.Millisecond
		s, err := memstore.New(memstore.Config{ClockResolution: res, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		l := limiter(t, s, portero.Rule{Algorithm: portero.GCRA, Limit: portero.Limit{Count: 1000, Window: time.Second, Burst: 1}})
		var last time.Time
		admitted, behind := 0, 0
		for i := range 400 {
			time.Sleep(300 * time.Microsecond)
			synctest.Wait()
			got, real := s.Now(), time.Now()
			if got.After(real) || real.Sub(got) > res {
				t.Fatalf("reading %d: Now() = %v behind the monotonic clock by %v, want within [0, %v]", i, got, real.Sub(got), res)
			}
			if got.Before(real) {
				behind++
			}
			if got.Before(last) {
				t.Fatalf("reading %d: Now() went back from %v to %v", i, last, got)
			}
			last = got
			// A burst of 1 at 1000/s: one request per tick of the clock,
			// since every decision within a tick is at the tick's instant.
			for range 3 {
				if d, err := l.Allow(ctx, "k"); err != nil {
					t.Fatal(err)
				} else if d.Allowed {
					admitted++
				}
			}
		}
		if behind < 200 {
			t.Errorf("%d readings of 400 behind the monotonic clock: the clock is not coarse", behind)
		}
		if want := 120; admitted < want-1 || admitted > want+1 {
			t.Errorf("admitted %d over 120 ms at 1000/s with a burst of 1, want %d±1", admitted, want)
		}
		// Unused for more than a hundred ticks, then read: exact.
		time.Sleep(150 * res)
		synctest.Wait()
		time.Sleep(res / 3)
		if got, real := s.Now(), time.Now(); !got.Equal(real) {
			t.Errorf("Now() after the refresher slept = %v, want the monotonic clock %v exactly", got, real)
		}
		synctest.Wait() // the refresher wakes
		time.Sleep(res / 3)
		if got, real := s.Now(), time.Now(); got.After(real) || real.Sub(got) > res || got.Equal(real) {
			t.Errorf("Now() once the refresher is awake again = %v, %v behind, want a reading within (0, %v]", got, real.Sub(got), res)
		}
	})
}

func TestClockResolutionErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  memstore.Config
		want string
	}{
		{memstore.Config{ClockResolution: -time.Millisecond}, "must not be negative"},
		{memstore.Config{ClockResolution: time.Millisecond, Now: time.Now}, "not to Config.Now"},
	} {
		if s, err := memstore.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			if s != nil {
				s.Close(context.Background())
			}
			t.Errorf("New(ClockResolution %v) = %v, want an error containing %q", tc.cfg.ClockResolution, err, tc.want)
		}
	}
}
