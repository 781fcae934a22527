package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/store/redisstore"
)

// TestClusterMasterDown kills one master of a real three-master cluster
// that serves the slots it still covers: the keys of the two live masters
// are decided by Redis, the dead one's get ErrStoreUnavailable (their
// failure policy), and the store's health says so steadily — degraded on
// every call, not flipping back with each answer of a live master; one
// "unavailable" line, no "answers again"; the live masters' nodes healthy
// with their breakers closed.
func TestClusterMasterDown(t *testing.T) {
	c := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
	log := &testenv.Buffer{}
	s := newStore(t, nil, redisstore.Config{Addrs: c.Addrs(), Timeout: 5 * time.Second, // a kill is seen at once; a load is not a failure
		BreakerMinCalls: 3, Logger: slog.New(slog.NewTextHandler(log, nil))})
	rule := portero.Rule{Name: "n", Algorithm: portero.GCRA, Limit: portero.Limit{Count: 1000, Window: time.Hour}}
	keys := make([]string, len(c.Nodes)) // keys[i] is on node i
	for i, found := 0, 0; found < len(keys); i++ {
		k := fmt.Sprintf("k%d", i)
		rk, _ := s.Key(rule, k)
		if n := nodeOf(t, c, rk); keys[n] == "" {
			keys[n], found = k, found+1
		}
	}
	decide := func(k string) error {
		d, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: k, Cost: 1}})
		if err == nil && !d[0].Allowed {
			t.Fatalf("key %s on a live master refused: %+v", k, d[0])
		}
		return err
	}
	for _, k := range keys {
		if err := decide(k); err != nil {
			t.Fatalf("before the kill: %v", err)
		}
	}
	// The store reads the slots when it connects, and again when it meets
	// a slot it does not know (a view of the cluster not complete yet).
	for deadline := time.Now().Add(10 * time.Second); len(s.Nodes()) != 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Nodes() = %+v, want one per master", s.Nodes())
		}
		for _, k := range keys {
			decide(k)
		}
	}

	const dead = 2
	from := len(log.String())
	c.Nodes[dead].Kill()
	for round := range 30 {
		for i, k := range keys {
			err := decide(k)
			if i == dead {
				if !errors.Is(err, portero.ErrStoreUnavailable) {
					t.Fatalf("round %d: key on the dead master: err = %v, want ErrStoreUnavailable", round, err)
				}
			} else if err != nil {
				t.Fatalf("round %d: key on live master %d: %v", round, i, err)
			}
			if (round > 0 || i >= dead) && !s.Degraded() { // from the first call that found it dead
				t.Fatalf("round %d, key on master %d: Degraded() = false while a master is dead", round, i)
			}
		}
	}
	for i, n := range s.Nodes() {
		if want := i == dead; n.Unavailable != want {
			t.Errorf("node %d %+v: Unavailable = %v, want %v", i, n, n.Unavailable, want)
		}
		if i != dead && n.Breaker != "closed" {
			t.Errorf("live node %d %+v: breaker %s, want closed", i, n, n.Breaker)
		}
	}
	lines := log.String()[from:]
	if n := strings.Count(lines, "unavailable: the callers' failure policies decide"); n != 1 {
		t.Errorf("%d lines say unavailable, want 1:\n%s", n, lines)
	}
	if strings.Contains(lines, "answers again") {
		t.Errorf("a line says Redis answers again while its master is dead:\n%s", lines)
	}
	if want := c.Nodes[dead].Addr(); !strings.Contains(lines, want) {
		t.Errorf("the log does not name the dead master %s:\n%s", want, lines)
	}
}
