package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
	"github.com/portero-rl/portero/store/storetest"
)

// TestPeekResetMatchMemstore replays random traces (several hits per call,
// any cost, time going back in places) on a caller-clock Redis store and a
// memory store side by side, peeking at every key of every rule before
// every other call (sometimes at a later instant than the call's) and
// resetting a key now and then: the peeks, and the decisions after them,
// are equal to the nanosecond.
func TestPeekResetMatchMemstore(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	keys := []string{"alice", "bob", "carol", "192.0.2.1", "nobody"}
	for _, a := range portero.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			var rules []portero.Rule
			for _, r := range storetest.RandomRules() {
				if r.Algorithm == a {
					rules = append(rules, r)
				}
			}
			rules = append(rules, storetest.RandomRules()[(len(a)*5)%len(storetest.RandomRules())])
			rs := newStore(t, srv, redisstore.Config{Clock: redisstore.CallerClock})
			ms, err := memstore.New(memstore.Config{Shards: 1, SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ms.Close(ctx) })
			rnd := rand.New(rand.NewPCG(uint64(len(a)), 3))
			peeks, resets := 0, 0
			for i, c := range storetest.RandomTrace(uint64(len(a))*7+2, rules, 500, true) {
				now := storetest.Base.Add(c.At)
				if i%2 == 0 {
					at := now
					if rnd.IntN(8) == 0 {
						at = at.Add(time.Duration(rnd.Int64N(int64(time.Second))))
					}
					for _, r := range rules {
						for _, k := range keys {
							cost := 1 + rnd.Int64N(3) // every random rule admits 3 at once
							got, gerr := rs.Peek(ctx, r, k, at, cost)
							want, werr := ms.Peek(ctx, r, k, at, cost)
							if gerr != nil || werr != nil {
								t.Fatalf("call %d: Peek(%s, %q): redis %v, memory %v", i, r.Name, k, gerr, werr)
							}
							if got != want {
								t.Fatalf("call %d at %v: Peek(%s/%s, %q):\n redis  %+v\n memory %+v", i, at.Sub(storetest.Base), r.Algorithm, r.Name, k, got, want)
							}
							peeks++
						}
					}
				}
				if i%37 == 36 {
					r, k := rules[rnd.IntN(len(rules))], keys[rnd.IntN(len(keys))]
					if err := rs.Reset(ctx, r, k); err != nil {
						t.Fatalf("call %d: redis Reset: %v", i, err)
					}
					if err := ms.Reset(ctx, r, k); err != nil {
						t.Fatalf("call %d: memory Reset: %v", i, err)
					}
					resets++
				}
				got, gerr := rs.AllowAll(ctx, now, c.Hits)
				want, werr := ms.AllowAll(ctx, now, c.Hits)
				if (gerr == nil) != (werr == nil) {
					t.Fatalf("call %d %v: redis error %v, memory %v", i, c, gerr, werr)
				}
				for j := range got {
					if got[j] != want[j] {
						t.Fatalf("call %d %v, hit %d:\n redis  %+v\n memory %+v", i, c, j, got[j], want[j])
					}
				}
			}
			if peeks == 0 || resets == 0 {
				t.Fatalf("%d peeks, %d resets", peeks, resets)
			}
		})
	}
}

// TestPeekWritesNothing: a peek at a key with no state creates no Redis
// key, and a peek at a stored state leaves its bytes as they were; Reset
// deletes the one Redis key the rule keeps for the client, under the
// prefix and the configured hash tag, and nothing else.
func TestPeekWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, redisstore.Config{
		Clock:   redisstore.CallerClock,
		Prefix:  "peek:",
		HashTag: func(h portero.Hit) string { return "tenant-" + h.Key[:1] },
	})
	now := storetest.Base
	for _, a := range portero.Algorithms {
		rule := portero.Rule{Name: "p", Algorithm: a, Limit: portero.Limit{Count: 3, Window: time.Minute}}
		key, err := s.Key(rule, "alice")
		if err != nil {
			t.Fatal(err)
		}
		other, _ := s.Key(rule, "amos")
		if d, err := s.Peek(ctx, rule, "alice", now, 1); err != nil || !d.Allowed || d.Remaining != 3 || d.ResetAfter != 0 {
			t.Errorf("%s: peek at a fresh key = %+v, %v; want allowed, all 3 remaining, whole", a, d, err)
		}
		if n, _ := redistest.Do(srv.Addr(), "EXISTS", key); n != "0" {
			t.Errorf("%s: a peek created %s", a, key)
		}
		for range 4 {
			for _, k := range []string{"alice", "amos"} {
				if _, err := s.AllowAll(ctx, now, []portero.Hit{{Rule: rule, Key: k, Cost: 1}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		dump := func() string {
			if a == portero.SlidingLog {
				v, _ := redistest.Do(srv.Addr(), "ZRANGE", key, "0", "-1", "WITHSCORES")
				return v
			}
			v, _ := redistest.Do(srv.Addr(), "GET", key)
			return v
		}
		before := dump()
		for range 5 {
			d, err := s.Peek(ctx, rule, "alice", now, 1)
			if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Errorf("%s: peek at a key over its limit = %+v, %v; want refused with a wait", a, d, err)
			}
		}
		if after := dump(); after != before {
			t.Errorf("%s: peeks changed the state:\n before %q\n after  %q", a, before, after)
		}
		if err := s.Reset(ctx, rule, "alice"); err != nil {
			t.Fatalf("%s: Reset = %v", a, err)
		}
		if n, _ := redistest.Do(srv.Addr(), "EXISTS", key); n != "0" {
			t.Errorf("%s: %s still there after Reset", a, key)
		}
		if n, _ := redistest.Do(srv.Addr(), "EXISTS", other); n != "1" {
			t.Errorf("%s: Reset of alice removed amos's %s", a, other)
		}
		if d, err := s.AllowAll(ctx, now, []portero.Hit{{Rule: rule, Key: "alice", Cost: 1}}); err != nil || !d[0].Allowed || d[0].Remaining != 2 {
			t.Errorf("%s: first request after Reset = %+v, %v; want allowed, 2 remaining", a, d, err)
		}
		if err := s.Reset(ctx, rule, "nobody"); err != nil {
			t.Errorf("%s: Reset of a key with no state = %v", a, err)
		}
	}
}

// TestPeekResetErrors: invalid rules, a closed store and a Redis that does
// not answer are errors, the last wrapping ErrStoreUnavailable.
func TestPeekResetErrors(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, redisstore.Config{Timeout: 200 * time.Millisecond})
	bad := portero.Rule{Name: "bad", Algorithm: portero.GCRA}
	if _, err := s.Peek(ctx, bad, "k", time.Now(), 1); !errors.Is(err, portero.ErrInvalidLimit) {
		t.Errorf("Peek(zero limit) = %v, want ErrInvalidLimit", err)
	}
	if err := s.Reset(ctx, bad, "k"); !errors.Is(err, portero.ErrInvalidLimit) {
		t.Errorf("Reset(zero limit) = %v, want ErrInvalidLimit", err)
	}
	r := portero.Rule{Name: "r", Algorithm: portero.TokenBucket, Limit: portero.PerSecond(5)}
	srv.Kill()
	if _, err := s.Peek(ctx, r, "k", time.Now(), 1); !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Errorf("Peek with Redis down = %v, want ErrStoreUnavailable (no failure policy)", err)
	}
	if err := s.Reset(ctx, r, "k"); !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Errorf("Reset with Redis down = %v, want ErrStoreUnavailable", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Peek(ctx, r, "k", time.Now(), 1); !errors.Is(err, portero.ErrClosed) {
		t.Errorf("Peek after Close = %v, want ErrClosed", err)
	}
	if err := s.Reset(ctx, r, "k"); !errors.Is(err, portero.ErrClosed) {
		t.Errorf("Reset after Close = %v, want ErrClosed", err)
	}
}

// TestPeekResetCluster: on a three-master cluster, keys owned by every node
// are peeked at and reset with the server clock.
func TestPeekResetCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := redistest.StartCluster(t, 3)
	s := newStore(t, nil, redisstore.Config{Addrs: c.Addrs(), Timeout: 5 * time.Second, Prefix: "clr:"})
	ctx := context.Background()
	for _, rule := range []portero.Rule{
		{Name: "g", Algorithm: portero.GCRA, Limit: portero.PerHour(2)},
		{Name: "l", Algorithm: portero.SlidingLog, Limit: portero.PerHour(2)},
	} {
		owners := map[int]bool{}
		for i := 0; len(owners) < 3; i++ {
			k := fmt.Sprintf("client-%d", i)
			rk, _ := s.Key(rule, k)
			owners[nodeOf(t, c, rk)] = true
			for range 3 {
				if _, err := s.AllowAll(ctx, time.Now(), []portero.Hit{{Rule: rule, Key: k, Cost: 1}}); err != nil {
					t.Fatal(err)
				}
			}
			if d, err := s.Peek(ctx, rule, k, time.Now(), 1); err != nil || d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("%s %q: peek after 3 requests on a limit of 2 = %+v, %v", rule.Name, k, d, err)
			}
			if err := s.Reset(ctx, rule, k); err != nil {
				t.Fatalf("%s %q: Reset = %v", rule.Name, k, err)
			}
			if d, err := s.Peek(ctx, rule, k, time.Now(), 1); err != nil || !d.Allowed || d.Remaining != 2 {
				t.Fatalf("%s %q: peek after Reset = %+v, %v; want a fresh key's", rule.Name, k, d, err)
			}
		}
	}
}
