package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/redisstore"
	"github.com/portero-rl/portero/store/storetest"
)

// TestBatchedMatchesReference issues one-hit random traces concurrently, one
// key per lane and each lane in order, so that calls queue up and are
// decided in batches; every lane's decisions must be those of
// storetest.Reference replaying the lane alone (keys of different lanes do
// not interact, so the interleaving across lanes cannot matter).
func TestBatchedMatchesReference(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{Clock: redisstore.CallerClock})
	const lanes, calls = 64, 150
	rules := storetest.RandomRules()
	traces := make([][]storetest.Trace, lanes)
	for l := range traces {
		key := fmt.Sprintf("lane%d", l)
		for _, c := range storetest.RandomTrace(uint64(l)*7+1, rules, calls, l%2 == 1) {
			h := c.Hits[0]
			h.Key = key
			traces[l] = append(traces[l], storetest.Trace{At: c.At, Hits: []portero.Hit{h}})
		}
	}
	got := make([][]portero.Decision, lanes)
	errs := make([][]error, lanes)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for l := range traces {
		wg.Go(func() {
			<-start
			for _, c := range traces[l] {
				d, err := s.AllowAll(context.Background(), storetest.Base.Add(c.At), c.Hits)
				var one portero.Decision
				if len(d) == 1 {
					one = d[0]
				}
				got[l], errs[l] = append(got[l], one), append(errs[l], err)
			}
		})
	}
	close(start)
	wg.Wait()
	for l, tr := range traces {
		ref := storetest.NewReference()
		for i, c := range tr {
			w, werr := ref.AllowAll(context.Background(), storetest.Base.Add(c.At), c.Hits)
			if (errs[l][i] == nil) != (werr == nil) {
				t.Fatalf("lane %d, call %d %v: error %v, want %v", l, i, c, errs[l][i], werr)
			}
			if werr == nil && got[l][i] != w[0] {
				t.Fatalf("lane %d, call %d %v:\n got %+v\nwant %+v", l, i, c, got[l][i], w[0])
			}
		}
	}
	st := s.Stats()
	t.Logf("%d calls, %d batches deciding %d of them", st.Calls, st.Batches, st.Batched)
	if st.Batches == 0 {
		t.Errorf("no batch ran: the test did not exercise batching")
	}
}

// TestBatchedSameKey sends concurrent calls on one key at one instant: the
// batch script decides hits on one key in order, so exactly the limit is
// admitted and the remainders are each value once.
func TestBatchedSameKey(t *testing.T) {
	srv := redistest.Start(t)
	for _, alg := range []portero.Algorithm{portero.FixedWindow, portero.TokenBucket, portero.GCRA, portero.SlidingCounter} {
		t.Run(string(alg), func(t *testing.T) {
			s := newStore(t, srv, redisstore.Config{Clock: redisstore.CallerClock})
			rule := portero.Rule{Name: "same", Algorithm: alg, Limit: portero.Limit{Count: 100, Window: time.Hour}}
			var mu sync.Mutex
			admitted := map[int64]int{}
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for range 10 {
						d, err := s.AllowAll(context.Background(), storetest.Base, []portero.Hit{{Rule: rule, Key: "k", Cost: 1}})
						if err != nil {
							t.Error(err)
							return
						}
						if d[0].Allowed {
							mu.Lock()
							admitted[d[0].Remaining]++
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if len(admitted) != 100 {
				t.Errorf("%d distinct remainders admitted, want 100", len(admitted))
			}
			for r, n := range admitted {
				if n != 1 || r < 0 || r >= 100 {
					t.Errorf("remaining %d admitted %d times", r, n)
				}
			}
			if st := s.Stats(); st.Batches == 0 {
				t.Logf("no batch ran (%d calls)", st.Calls)
			}
		})
	}
}

// TestBatchedWrongType: a key of the wrong type fails only its own call,
// with the error it gets alone, while the calls batched with it are decided.
func TestBatchedWrongType(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{})
	rule := portero.Rule{Name: "bad", Algorithm: portero.GCRA, Limit: portero.PerMinute(1000)}
	for k, wrong := range map[string][]string{"list": {"RPUSH", "", "a"}, "string": {"SET", "", "not a counter"}} {
		key, _ := s.Key(rule, k)
		wrong[1] = key
		if _, err := redistest.Do(srv.Addr(), wrong...); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for g := range 48 {
		wg.Go(func() {
			key := fmt.Sprintf("good%d", g)
			if g < 2 {
				key = []string{"list", "string"}[g]
			}
			for range 30 {
				d, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: key, Cost: 1}})
				if g >= 2 {
					if err != nil || !d[0].Allowed {
						t.Errorf("key %s: %+v, %v: want admitted", key, d, err)
						return
					}
					continue
				}
				if err == nil || !errors.Is(err, redisstore.ErrScript) || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), `"`+key+`"`) {
					t.Errorf("key %s: error %v: want ErrScript naming the key and WRONGTYPE", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.Batches == 0 {
		t.Errorf("no batch ran (%d calls)", st.Calls)
	}
}
