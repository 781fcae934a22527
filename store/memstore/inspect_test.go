package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/storetest"
)

func peek(t *testing.T, s *memstore.Store, r portero.Rule, key string, now time.Time) portero.Decision {
	t.Helper()
	d, err := s.Peek(context.Background(), r, key, now, 1)
	if err != nil {
		t.Fatalf("Peek(%s, %q) = %v", r.Name, key, err)
	}
	return d
}

// Peeking many times counts nothing: the store that was peeked at decides
// the same requests afterwards as a twin that never was, and the first
// Limit of them pass.
func TestPeekDoesNotConsume(t *testing.T) {
	ctx := context.Background()
	now := storetest.Base
	for _, r := range storetest.RandomRules() {
		t.Run(fmt.Sprintf("%s/%s", r.Algorithm, r.Name), func(t *testing.T) {
			s, twin := newStore(t, memstore.Config{}), newStore(t, memstore.Config{})
			fresh := peek(t, s, r, "k", now)
			if !fresh.Allowed || fresh.Remaining != fresh.Limit || fresh.ResetAfter != 0 {
				t.Errorf("peek at a fresh key: %+v, want allowed with all %d remaining, whole", fresh, fresh.Limit)
			}
			for range 3 * fresh.Limit {
				if d := peek(t, s, r, "k", now); d != fresh {
					t.Fatalf("peek again: %+v, want %+v", d, fresh)
				}
			}
			if n := s.Len(); n != 0 {
				t.Errorf("the store holds %d keys after peeks only", n)
			}
			for i := range fresh.Limit + 1 {
				got, err := limiter(t, s, r).AllowN(ctx, "k", now, 1)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := limiter(t, twin, r).AllowN(ctx, "k", now, 1)
				if got != want {
					t.Fatalf("request %d after the peeks: %+v, want %+v as in a store never peeked at", i, got, want)
				}
				if got.Allowed != (i < fresh.Limit) {
					t.Fatalf("request %d of a limit of %d: allowed %v", i, fresh.Limit, got.Allowed)
				}
				// A peek between requests says what the next one gets.
				if i < fresh.Limit {
					p := peek(t, s, r, "k", now)
					if p.Allowed != (i+1 < fresh.Limit) {
						t.Fatalf("peek after %d requests: %+v", i+1, p)
					}
				}
			}
		})
	}
}

// Along a random trace of cost-1 requests (time going back in places, for
// every algorithm but the sliding log: see Peek), a peek at the instant of
// each call, on its key and on the others, answers what the call then gets
// (as of before it: an admitted call leaves one less than the peek said);
// and the calls decide exactly as storetest.Reference does without peeks.
func TestPeekMatchesNextAllow(t *testing.T) {
	ctx := context.Background()
	keys := []string{"alice", "bob", "carol", "192.0.2.1"}
	for _, a := range portero.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			var rules []portero.Rule
			for _, r := range storetest.RandomRules() {
				if r.Algorithm == a {
					rules = append(rules, r)
				}
			}
			s, ref := newStore(t, memstore.Config{Shards: 1}), storetest.NewReference()
			trace := storetest.RandomTrace(uint64(len(a))*13+5, rules, 2000, a != portero.SlidingLog)
			for i, c := range trace {
				h := c.Hits[0]
				h.Cost = 1
				now := storetest.Base.Add(c.At)
				var p portero.Decision
				for _, k := range keys {
					d := peek(t, s, h.Rule, k, now)
					if k == h.Key {
						p = d
					}
				}
				got, err := limiter(t, s, h.Rule).AllowN(ctx, h.Key, now, 1)
				if err != nil {
					t.Fatal(err)
				}
				next := p
				if got.Allowed {
					next.Remaining, next.ResetAfter = p.Remaining-1, got.ResetAfter
				}
				if next != got {
					t.Fatalf("call %d %v: peek %+v, then AllowN %+v", i, c, p, got)
				}
				want, err := ref.AllowAll(ctx, now, []portero.Hit{h})
				if err != nil {
					t.Fatal(err)
				}
				if got != want[0] {
					t.Fatalf("call %d %v: %+v, want %+v as without peeks", i, c, got, want[0])
				}
			}
		})
	}
}

// A key that has used its limit passes again after Reset, as a fresh key
// would; resetting keys leaves the other keys of the shard (found past the
// hole by linear probing) exactly as they were.
func TestReset(t *testing.T) {
	ctx := context.Background()
	now := storetest.Base
	for _, r := range storetest.RandomRules() {
		t.Run(fmt.Sprintf("%s/%s", r.Algorithm, r.Name), func(t *testing.T) {
			s := newStore(t, memstore.Config{Shards: 1, SweepInterval: -1})
			l := limiter(t, s, r)
			keys := make([]string, 200)
			for i := range keys {
				keys[i] = fmt.Sprintf("client-%d", i)
				for {
					d, err := l.AllowN(ctx, keys[i], now, 1)
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						break
					}
				}
			}
			if err := s.Reset(ctx, r, "never-seen"); err != nil {
				t.Fatalf("Reset of an absent key = %v", err)
			}
			for i := 0; i < len(keys); i += 2 {
				if err := s.Reset(ctx, r, keys[i]); err != nil {
					t.Fatalf("Reset(%q) = %v", keys[i], err)
				}
			}
			if err := s.Reset(ctx, r, keys[0]); err != nil {
				t.Fatalf("second Reset(%q) = %v", keys[0], err)
			}
			if n := s.Len(); n != len(keys)/2 {
				t.Errorf("%d keys after resetting half of %d", n, len(keys))
			}
			fresh := peek(t, s, r, "never-seen", now)
			for i, k := range keys {
				p := peek(t, s, r, k, now)
				if i%2 == 1 {
					if p.Allowed || p.Remaining != 0 || p.RetryAfter <= 0 {
						t.Fatalf("key %q, not reset: peek %+v, want refused with a wait", k, p)
					}
					continue
				}
				if p != fresh {
					t.Fatalf("key %q after Reset: peek %+v, want a fresh key's %+v", k, p, fresh)
				}
				d, err := l.AllowN(ctx, k, now, 1)
				if err != nil || !d.Allowed {
					t.Fatalf("key %q after Reset: %+v, %v", k, d, err)
				}
			}
		})
	}
}

func TestPeekResetErrors(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, memstore.Config{})
	bad := portero.Rule{Name: "bad", Algorithm: portero.GCRA}
	if _, err := s.Peek(ctx, bad, "k", time.Now(), 1); !errors.Is(err, portero.ErrInvalidLimit) {
		t.Errorf("Peek(zero limit) = %v, want ErrInvalidLimit", err)
	}
	if err := s.Reset(ctx, bad, "k"); !errors.Is(err, portero.ErrInvalidLimit) {
		t.Errorf("Reset(zero limit) = %v, want ErrInvalidLimit", err)
	}
	unknown := portero.Rule{Name: "u", Algorithm: "nope", Limit: portero.PerSecond(1)}
	if _, err := s.Peek(ctx, unknown, "k", time.Now(), 1); !errors.Is(err, portero.ErrUnknownAlgorithm) {
		t.Errorf("Peek(unknown algorithm) = %v, want ErrUnknownAlgorithm", err)
	}
	r := portero.Rule{Name: "r", Algorithm: portero.TokenBucket, Limit: portero.PerSecond(5)}
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

// Peeks and resets run beside requests without races, and peeks take
// nothing: with no reset on its key, a limit of 1000 admits exactly 1000.
func TestPeekResetConcurrent(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, memstore.Config{Shards: 2})
	now := storetest.Base
	for _, r := range []portero.Rule{
		{Name: "fixed", Algorithm: portero.FixedWindow, Limit: portero.PerHour(1000)},
		{Name: "log", Algorithm: portero.SlidingLog, Limit: portero.PerHour(1000)},
	} {
		l := limiter(t, s, r)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 400 {
					switch g % 4 {
					case 0, 1:
						if d, err := l.AllowN(ctx, "k", now, 1); err == nil && d.Allowed {
							admitted.Add(1)
						}
						l.AllowN(ctx, fmt.Sprintf("other-%d", i%50), now, 1)
					case 2:
						if d, err := s.Peek(ctx, r, "k", now, 1); err != nil || d.Remaining < 0 || d.Remaining > d.Limit {
							t.Errorf("Peek = %+v, %v", d, err)
							return
						}
					case 3:
						if err := s.Reset(ctx, r, fmt.Sprintf("other-%d", i%50)); err != nil {
							t.Errorf("Reset = %v", err)
							return
						}
						s.Peek(ctx, r, fmt.Sprintf("other-%d", (i+7)%50), now, 1)
					}
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != 1000 {
			t.Errorf("%s: admitted %d on a limit of 1000 with peeks beside", r.Name, got)
		}
	}
}
