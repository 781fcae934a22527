package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/redisstore"
	"github.com/portero-rl/portero/store/storetest"
)

// TestCluster starts a real three-master Redis Cluster and shows exact
// limits for keys spread over all three nodes, under concurrent callers
// with separate clients; then runs the conformance suite on it.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := redistest.StartCluster(t, 3)
	cfg := redisstore.Config{Addrs: c.Addrs(), Timeout: 5 * time.Second, Prefix: "cl:"}
	a := newStore(t, nil, cfg) // two instances: separate clients, one cluster
	b := newStore(t, nil, cfg)

	rule := portero.Rule{Name: "c", Algorithm: portero.GCRA, Limit: portero.Limit{Count: 20, Window: time.Hour}}
	user := portero.Rule{Name: "user", Algorithm: portero.SlidingLog, Limit: portero.Limit{Count: 20, Window: time.Hour}}
	// Pick keys until every node owns some.
	var keys []string
	owners := map[int]int{}
	for i := 0; len(keys) < 12 || len(owners) < 3; i++ {
		k := fmt.Sprintf("client-%d", i)
		rk, _ := a.Key(rule, k)
		owners[nodeOf(t, c, rk)]++
		keys = append(keys, k)
	}
	t.Logf("%d keys over the nodes: %v", len(keys), owners)

	var wg sync.WaitGroup
	admitted := make([]atomic.Int64, len(keys))
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if w%2 == 1 {
				s = b
			}
			for j := 0; j < 10; j++ {
				for i, k := range keys {
					// Two rules on one key: one slot, one atomic script.
					d, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: k, Cost: 1}, {Rule: user, Key: k, Cost: 1}})
					if err != nil {
						t.Error(err)
						return
					}
					if d[0].Allowed && d[1].Allowed {
						admitted[i].Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	for i, k := range keys {
		if n := admitted[i].Load(); n != 20 {
			t.Errorf("key %s: admitted %d of 80, want exactly 20", k, n)
		}
	}

	// A call over several slots: decided without counting first, so a
	// refusal anywhere counts nothing anywhere.
	full := keys[0]
	fresh := "fresh-key"
	d, err := a.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: fresh, Cost: 1}, {Rule: rule, Key: full, Cost: 1}})
	if err != nil || d[0].Allowed == false || d[1].Allowed {
		t.Fatalf("cross-slot call = %+v, %v; want the fresh hit alone allowed, the full one refused", d, err)
	}
	d, err = a.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: fresh, Cost: 20}})
	if err != nil || !d[0].Allowed {
		t.Fatalf("fresh key after a refused cross-slot call = %+v, %v; want all 20 still there", d, err)
	}

	t.Run("conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) portero.Store {
			return newStore(t, nil, redisstore.Config{Addrs: c.Addrs(), Clock: redisstore.CallerClock})
		})
	})
}

// nodeOf returns the index of the node that owns the Redis key rk.
func nodeOf(t *testing.T, c *redistest.Cluster, rk string) int {
	t.Helper()
	for i, n := range c.Nodes {
		s, err := redistest.Do(n.Addr(), "CLUSTER", "KEYSLOT", rk)
		if err != nil {
			t.Fatal(err)
		}
		var slot int
		fmt.Sscan(s, &slot)
		if lo, hi := i*16384/len(c.Nodes), (i+1)*16384/len(c.Nodes)-1; lo <= slot && slot <= hi {
			return i
		}
	}
	t.Fatalf("no node owns %q", rk)
	return -1
}
