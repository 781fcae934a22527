package memstore_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/storetest"
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

// The forms that read the store's clock decide exactly what the Reference
// decides at the instant Store.Now reads, for every algorithm, with the
// store's own clock and with the coarse one. In a synctest bubble the
// clock stands still between the two readings, and synctest.Wait lets the
// coarse clock's refresher catch up before they are taken.
func TestClockFormsMatchReference(t *testing.T) {
	for _, clock := range []struct {
		name string
		cfg  memstore.Config
	}{
		{"own", memstore.Config{Shards: 2, SweepInterval: -1}},
		{"coarse", memstore.Config{Shards: 2, SweepInterval: -1, ClockResolution: time.Millisecond}},
	} {
		for _, a := range portero.Algorithms {
			t.Run(clock.name+"/"+string(a), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { clockFormsMatch(t, clock.cfg, a) })
			})
		}
	}
}

func clockFormsMatch(t *testing.T, cfg memstore.Config, a portero.Algorithm) {
	ctx := context.Background()
	s, err := memstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	ref := storetest.NewReference()
	lims := map[portero.Rule]*memstore.Limiter{}
	var rules []portero.Rule
	for _, r := range storetest.RandomRules() {
		if r.Algorithm == a {
			rules = append(rules, r)
			lims[r] = limiter(t, s, r)
		}
	}
	start := time.Now()
	allowed := 0
	for i, c := range storetest.RandomTrace(11, rules, 600, false) {
		time.Sleep(c.At - time.Since(start))
		synctest.Wait()
		h := c.Hits[0]
		now := s.Now()
		var got portero.Decision
		if h.Cost == 1 {
			got, err = lims[h.Rule].Allow(ctx, h.Key)
		} else {
			got, err = lims[h.Rule].AllowN(ctx, h.Key, now, h.Cost)
		}
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		want, err := ref.AllowAll(ctx, now, []portero.Hit{h})
		if err != nil {
			t.Fatal(err)
		}
		if got != want[0] {
			t.Fatalf("call %d %v at %v:\n got %+v\nwant %+v", i, c, now, got, want[0])
		}
		if got.Allowed {
			allowed++
		}
	}
	if allowed == 0 {
		t.Error("no call admitted: the trace checks nothing")
	}
}
