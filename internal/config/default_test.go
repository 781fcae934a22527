package config_test

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// TestDefaultLoginExact drives the built-in policy's login rule ("3 per
// minute") with four logins inside one minute, in every timing that matters
// (the first three at the end of a window and the fourth early in the next,
// the sliding counter's blind spot, at several offsets from the clock's
// minute) and in 2,000 random ones: the fourth is refused every time. A
// sliding counter would let three logins at 0:59.9 and one at 1:15, 4 in
// 15 s, all pass.
func TestDefaultLoginExact(t *testing.T) {
	c, err := config.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	type timing [4]time.Duration // offsets of the four logins from the first
	var timings []timing
	for _, last := range []time.Duration{time.Millisecond, time.Second, 15 * time.Second, 30 * time.Second, 59*time.Second + 999*time.Millisecond} {
		timings = append(timings, timing{0, 0, 0, last}, timing{0, last / 3, last / 2, last})
	}
	rng := rand.New(rand.NewPCG(10, 2))
	for range 2000 {
		var tm timing
		for i := 1; i < 4; i++ {
			tm[i] = tm[i-1] + time.Duration(rng.Int64N(int64(20*time.Second)))
		}
		if tm[3] < time.Minute {
			timings = append(timings, tm)
		}
	}
	minute := time.Unix(1_800_000_000, 0).Truncate(time.Minute)
	starts := []time.Duration{0, 500 * time.Millisecond, 30 * time.Second, 45 * time.Second, 59*time.Second + 900*time.Millisecond}
	req := &policy.Request{Method: "POST", Path: "/login", ClientIP: netip.MustParseAddr("192.0.2.7")}
	for _, start := range starts {
		for _, tm := range timings {
			store, err := memstore.New(memstore.Config{SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			e, err := engine.New(engine.Options{Store: store, OnError: portero.FailError})
			if err != nil {
				t.Fatal(err)
			}
			var got [4]bool
			var v engine.Verdict
			for i, off := range tm {
				hits, _, err := c.Policy.Compile(req, nil, nil)
				if err == nil {
					err = e.Decide(context.Background(), minute.Add(start+off), hits, &v)
				}
				if err != nil {
					t.Fatal(err)
				}
				got[i] = v.Allowed
			}
			store.Close(context.Background())
			if got != [4]bool{true, true, true, false} {
				t.Fatalf("logins at %v after the minute +%v: allowed %v, want the first three and not the fourth", start, tm, got)
			}
		}
	}
}
