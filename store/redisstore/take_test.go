package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/storetest"
)

// TestTakeConformance runs the take tables and random traces of takes,
// requests and refunds (storetest.RunTake) against a real redis-server,
// with functions and with the scripts run by hash, so that lua/take.lua
// cannot drift from algorithm.Take.
func TestTakeConformance(t *testing.T) {
	srv := redistest.Start(t)
	for _, byHash := range []bool{false, true} {
		name := "functions"
		if byHash {
			name = "by-hash"
		}
		t.Run(name, func(t *testing.T) {
			storetest.RunTake(t, func(t *testing.T) portero.Store {
				s := newInternalStore(t, srv.URL())
				s.scripts.lib.off.Store(byHash)
				return s
			})
		})
	}
}

// TestTakeUnavailable: a take from a Redis that is gone is an error
// wrapping portero.ErrStoreUnavailable, counted as the store's other
// unavailable calls.
func TestTakeUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	s := newInternalStore(t, srv.URL())
	rule := portero.Rule{Name: "fw", Algorithm: portero.FixedWindow, Limit: portero.PerSecond(10)}
	if n, _, err := s.Take(context.Background(), time.Now(), rule, "k", 1, 5); err != nil || n == 0 {
		t.Fatalf("Take = %d, %v; want units", n, err)
	}
	srv.Kill()
	_, _, err := s.Take(context.Background(), time.Now(), rule, "k", 1, 5)
	if !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Fatalf("Take with Redis gone = %v, want ErrStoreUnavailable", err)
	}
	if st := s.Stats(); st.Unavailable != 1 {
		t.Errorf("Stats().Unavailable = %d, want 1", st.Unavailable)
	}
}
