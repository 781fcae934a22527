package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/redisstore"
	"github.com/portero-rl/portero/store/storetest"
)

// TestNanosecondTraces replays the conformance suite's random traces with
// instants moved by random nanoseconds, far from whole microseconds, and
// with a base instant that is not a whole second: caller-clock decisions
// equal storetest.Reference's to the nanosecond.
func TestNanosecondTraces(t *testing.T) {
	srv := redistest.Start(t)
	r := rand.New(rand.NewPCG(7, 11))
	for _, a := range portero.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			var rules []portero.Rule
			for _, rule := range storetest.RandomRules() {
				if rule.Algorithm == a {
					rules = append(rules, rule)
				}
			}
			// A rate whose interval is not a whole microsecond (1/3 s).
			rules = append(rules, portero.Rule{Name: "thirds", Algorithm: a, Limit: portero.Limit{Count: 3, Window: time.Second, Burst: 2}})
			trace := storetest.RandomTrace(uint64(len(a))*17+3, rules, 600, true)
			shift := time.Duration(r.Int64N(int64(time.Second)))
			for i := range trace {
				trace[i].At += shift + time.Duration(r.Int64N(1000))
			}
			s := newStore(t, srv, redisstore.Config{Clock: redisstore.CallerClock})
			storetest.CompareTrace(t, s, storetest.NewReference(), trace)
		})
	}
}

// TestLongLogRebase runs a sliding log with a 12-day window for two months
// of caller-clock time, so that its offsets pass 2^51 ns and it rebases.
func TestLongLogRebase(t *testing.T) {
	srv := redistest.Start(t)
	rule := portero.Rule{Name: "long", Algorithm: portero.SlidingLog, Limit: portero.Limit{Count: 4, Window: 12 * 24 * time.Hour}}
	var trace []storetest.Trace
	at := time.Duration(0)
	for i := 0; i < 300; i++ {
		at += time.Duration(i%7) * 7 * time.Hour / 3
		trace = append(trace, storetest.Trace{At: at + time.Duration(i)*time.Nanosecond, Hits: []portero.Hit{{Rule: rule, Key: "k", Cost: 1 + int64(i%2)}}})
	}
	if at < 60*24*time.Hour {
		t.Fatalf("trace spans only %v", at)
	}
	s := newStore(t, srv, redisstore.Config{Clock: redisstore.CallerClock})
	storetest.CompareTrace(t, s, storetest.NewReference(), trace)
	// The log never emptied (steps of at most 14 h, a 12-day window), so
	// only a rebase moves its base instant past the first 26 days.
	key, _ := s.Key(rule, "k")
	head, err := redistest.Do(srv.Addr(), "ZRANGE", key, "0", "0")
	if err != nil {
		t.Fatal(err)
	}
	sec, _, _ := strings.Cut(strings.TrimPrefix(head, "#"), ":")
	if b, _ := strconv.ParseInt(sec, 10, 64); b < storetest.Base.Add(26*24*time.Hour).Unix() {
		t.Errorf("log base %q: never rebased", head)
	}
}

// TestServerClockSkew: two instances whose local clocks are 20 s apart
// share one window on one key with the (default) server clock, so together
// they admit exactly the limit.
func TestServerClockSkew(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range portero.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			rule := portero.Rule{Name: "skew", Algorithm: alg, Limit: portero.Limit{Count: 50, Window: time.Hour}}
			prefix := "skew" + strconv.Itoa(int(prefixes.Add(1))) + ":"
			a := newStore(t, srv, redisstore.Config{Prefix: prefix})
			b := newStore(t, srv, redisstore.Config{Prefix: prefix})
			base := time.Now()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < 4; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 0; j < 40; j++ {
						s, now := a, base
						if (i+j)%2 == 1 {
							s, now = b, base.Add(20*time.Second) // b's clock is 20 s ahead
						}
						d, err := s.AllowAll(context.Background(), now, []portero.Hit{{Rule: rule, Key: "client", Cost: 1}})
						if err != nil {
							t.Error(err)
							return
						}
						if d[0].Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != 50 {
				t.Errorf("admitted %d of 160 across two instances 20 s apart, want exactly 50", got)
			}
		})
	}
}

// TestExpiry: after traffic stops every key has a TTL no longer than the
// time its state takes to return to full (ResetAfter, rounded up to a
// millisecond), and then it is gone.
func TestExpiry(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{Prefix: "exp:"})
	ctx := context.Background()
	var longest time.Duration
	for _, alg := range portero.Algorithms {
		rule := portero.Rule{Name: "exp", Algorithm: alg, Limit: portero.Limit{Count: 4, Window: 300 * time.Millisecond}}
		var last portero.Decision
		for i := 0; i < 6; i++ {
			d, err := s.AllowAll(ctx, time.Now(), []portero.Hit{{Rule: rule, Key: "k", Cost: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if d[0].Allowed {
				last = d[0]
			}
		}
		key, _ := s.Key(rule, "k")
		pttl, err := redistest.Do(srv.Addr(), "PTTL", key)
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := strconv.Atoi(pttl)
		if ms <= 0 || time.Duration(ms)*time.Millisecond > last.ResetAfter.Round(time.Millisecond)+time.Millisecond {
			t.Errorf("%s: PTTL %s ms, want in (0, %v] (the reset time of the last admitted request)", alg, pttl, last.ResetAfter)
		}
		longest = max(longest, last.ResetAfter)
	}
	time.Sleep(longest + 50*time.Millisecond)
	if keys, _ := redistest.Do(srv.Addr(), "KEYS", "exp:*"); keys != "" {
		t.Errorf("keys left after every state returned to full: %q", keys)
	}
}

// TestScriptReload: a SCRIPT FLUSH (a restart, a failover) is answered by
// reloading the script transparently.
func TestScriptReload(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{})
	rule := portero.Rule{Name: "r", Algorithm: portero.GCRA, Limit: portero.PerMinute(10)}
	for i := 0; i < 3; i++ {
		if _, err := redistest.Do(srv.Addr(), "SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		d, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: "k", Cost: 1}})
		if err != nil || !d[0].Allowed || d[0].Remaining != int64(9-i) {
			t.Fatalf("call %d after SCRIPT FLUSH = %+v, %v; want allowed, remaining %d", i, d, err, 9-i)
		}
	}
}

// TestWrongType: a key that holds another type (a list, or a string that is
// not Portero's state) is an error naming the store, the key, the rule and
// the algorithm, for a call of one hit (the one-hit script) and of two (the
// multi-hit driver); nothing is admitted or counted, and nothing panics.
func TestWrongType(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{})
	good := portero.Rule{Name: "good", Algorithm: portero.TokenBucket, Limit: portero.PerMinute(10)}
	for _, alg := range portero.Algorithms {
		rule := portero.Rule{Name: "bad", Algorithm: alg, Limit: portero.PerMinute(10)}
		key, _ := s.Key(rule, "victim")
		for _, wrong := range [][]string{{"SET", key, "not a counter"}, {"RPUSH", key, "a", "b"}} {
			for _, hits := range [][]portero.Hit{
				{{Rule: rule, Key: "victim", Cost: 1}},
				{{Rule: good, Key: "victim", Cost: 1}, {Rule: rule, Key: "victim", Cost: 1}},
			} {
				name := fmt.Sprintf("%s, %s, %d hits", alg, wrong[0], len(hits))
				if _, err := redistest.Do(srv.Addr(), "DEL", key); err != nil {
					t.Fatal(err)
				}
				if _, err := redistest.Do(srv.Addr(), wrong...); err != nil {
					t.Fatal(err)
				}
				d, err := s.AllowAll(context.Background(), time.Now(), hits)
				if err == nil {
					t.Fatalf("%s: wrong-type key: decisions %+v, want an error", name, d)
				}
				for _, want := range []string{"redisstore", `"victim"`, `"bad"`, string(alg), "WRONGTYPE"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: error %q does not mention %s", name, err, want)
					}
				}
				if !errors.Is(err, redisstore.ErrScript) || errors.Is(err, portero.ErrStoreUnavailable) {
					t.Errorf("%s: error %v: want ErrScript, not ErrStoreUnavailable", name, err)
				}
				for _, x := range d {
					if x.Allowed {
						t.Errorf("%s: admitted despite the error: %+v", name, d)
					}
				}
				gk, _ := s.Key(good, "victim")
				if n, _ := redistest.Do(srv.Addr(), "EXISTS", gk); n != "0" {
					t.Errorf("%s: the other hit of the failed call was counted", name)
				}
				if typ, _ := redistest.Do(srv.Addr(), "TYPE", key); typ != map[string]string{"SET": "string", "RPUSH": "list"}[wrong[0]] {
					t.Errorf("%s: the wrong-type key became a %s", name, typ)
				}
			}
		}
	}
}

// TestBadConfig: a malformed URL and an address that does not answer are
// errors at start-up that name the store and the address.
func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  redisstore.Config
		want string
	}{
		{redisstore.Config{URL: "http://nope"}, "redis URL"},
		{redisstore.Config{URL: "redis://user:secret@127.0.0.1:bad/0"}, "redis URL"},
		{redisstore.Config{Addrs: []string{"127.0.0.1:1"}}, "127.0.0.1:1"},
		{redisstore.Config{}, "no Redis address"},
		{redisstore.Config{Addrs: []string{"127.0.0.1:1"}, Prefix: "a{b}"}, "prefix"},
	} {
		s, err := redisstore.New(tc.cfg)
		if err == nil {
			s.Close(context.Background())
			t.Errorf("New(%+v) succeeded, want an error", tc.cfg)
			continue
		}
		if !strings.Contains(err.Error(), "redisstore") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming redisstore and %q", tc.cfg, err, tc.want)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("error %q shows the password", err)
		}
	}
}

// TestRuleLimits: rules beyond what the scripts compute exactly are refused
// with ErrInvalidLimit, not decided wrongly.
func TestRuleLimits(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{})
	for _, r := range []portero.Rule{
		{Name: "tiny", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 1, Window: time.Nanosecond * 500}},
		{Name: "huge", Algorithm: portero.SlidingCounter, Limit: portero.Limit{Count: 1, Window: 100 * 24 * time.Hour}},
		{Name: "log", Algorithm: portero.SlidingLog, Limit: portero.Limit{Count: 1, Window: 20 * 24 * time.Hour}},
		{Name: "slow", Algorithm: portero.TokenBucket, Limit: portero.Limit{Count: 1000, Window: 24 * time.Hour, Burst: 100000}},
	} {
		_, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: r, Key: "k", Cost: 1}})
		if !errors.Is(err, portero.ErrInvalidLimit) {
			t.Errorf("%s: error %v, want ErrInvalidLimit", r.Name, err)
		}
	}
}

func TestLimiter(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{Clock: redisstore.CallerClock})
	l, err := s.Limiter(portero.Rule{Name: "l", Algorithm: portero.FixedWindow, Limit: portero.PerSecond(2)})
	if err != nil {
		t.Fatal(err)
	}
	now := storetest.Base
	for i, want := range []bool{true, true, false} {
		d, err := l.AllowN(context.Background(), "k", now, 1)
		if err != nil || d.Allowed != want {
			t.Fatalf("AllowN #%d = %+v, %v; want allowed %v", i, d, err, want)
		}
	}
	if _, err := s.Limiter(portero.Rule{Name: "bad", Algorithm: "nope", Limit: portero.PerSecond(1)}); !errors.Is(err, portero.ErrUnknownAlgorithm) {
		t.Errorf("Limiter(unknown algorithm) error %v, want ErrUnknownAlgorithm", err)
	}
}

// BenchmarkAllowOne measures a decision of one hit (the one-hit script)
// from parallel callers, with its allocations.
func BenchmarkAllowOne(b *testing.B) {
	srv := redistest.Start(b)
	s := newStore(b, srv, redisstore.Config{})
	rule := portero.Rule{Name: "bench", Algorithm: portero.GCRA, Limit: portero.Limit{Count: 1_000_000, Window: time.Second}}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		hits := []portero.Hit{{Rule: rule, Key: "k", Cost: 1}}
		for pb.Next() {
			if _, err := s.AllowAll(context.Background(), time.Time{}, hits); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestWrongTypeAdjustAndTake: a string that is not Portero's state is
// Redis's WRONGTYPE error for a settlement and for a budget's take too
// (the prelude's read_state), and neither writes the key.
func TestWrongTypeAdjustAndTake(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{})
	rule := portero.Rule{Name: "bad", Algorithm: portero.TokenBucket, Limit: portero.PerMinute(10)}
	key, _ := s.Key(rule, "victim")
	if _, err := redistest.Do(srv.Addr(), "SET", key, "not a counter"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	errs := map[string]error{"adjust": s.Adjust(ctx, time.Now(), []portero.Adjustment{{Rule: rule, Key: "victim", Delta: 1}})}
	_, _, errs["take"] = s.Take(ctx, time.Now(), rule, "victim", 1, 5)
	for op, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("%s of a key that is not state: error %v, want WRONGTYPE", op, err)
		}
	}
	if v, _ := redistest.Do(srv.Addr(), "GET", key); v != "not a counter" {
		t.Errorf("the key holds %q after the failed calls", v)
	}
}
