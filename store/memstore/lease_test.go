package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/storetest"
)

// TestLeaseConformance runs the lease conformance suite (step tables,
// random traces against storetest.LeaseReference, concurrent acquisitions,
// errors) against the memory store.
func TestLeaseConformance(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T) portero.LeaseStore {
		return newStore(t, memstore.Config{})
	})
}

// TestLeaseMemoryBounded: keys whose leases are all released or expired
// are dropped (at once, or by the sweep), and Config.MaxKeys caps the keys
// that hold leases: beyond it Acquire fails with ErrStoreUnavailable rather
// than growing.
func TestLeaseMemoryBounded(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, memstore.Config{Shards: 1, MaxKeys: 10, SweepInterval: -1})
	rule := portero.ConcurrencyRule{Name: "c", Max: 1, TTL: time.Second}
	t0 := storetest.Base
	var held []portero.Lease
	for i := range 10 {
		l, d, err := s.Acquire(ctx, t0, rule, fmt.Sprint("k", i))
		if err != nil || !d.Allowed {
			t.Fatalf("Acquire k%d = %+v, %v", i, d, err)
		}
		held = append(held, l)
	}
	if _, _, err := s.Acquire(ctx, t0, rule, "one-too-many"); !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Errorf("Acquire on an 11th key = %v, want ErrStoreUnavailable", err)
	}
	held[0].Release(ctx)
	if _, d, err := s.Acquire(ctx, t0, rule, "eleventh"); err != nil || !d.Allowed {
		t.Errorf("Acquire after a release freed a key = %+v, %v", d, err)
	}
	// Once the leases expire, a new key finds room without a sweep.
	if _, d, err := s.Acquire(ctx, t0.Add(time.Second), rule, "later"); err != nil || !d.Allowed {
		t.Errorf("Acquire after every lease expired = %+v, %v", d, err)
	}
	if n := s.Sweep(t0.Add(time.Hour)); n == 0 {
		t.Errorf("Sweep dropped no lease keys, want the expired ones")
	}
	if n := s.Sweep(t0.Add(time.Hour)); n != 0 {
		t.Errorf("a second Sweep dropped %d", n)
	}
}

func TestLeaseClosed(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, memstore.Config{})
	rule := portero.ConcurrencyRule{Name: "c", Max: 1}
	l, _, err := s.Acquire(ctx, storetest.Base, rule, "k")
	if err != nil {
		t.Fatal(err)
	}
	s.Close(ctx)
	if _, _, err := s.Acquire(ctx, storetest.Base, rule, "k"); !errors.Is(err, portero.ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
	if err := l.Renew(ctx, storetest.Base); !errors.Is(err, portero.ErrClosed) {
		t.Errorf("Renew after Close = %v, want ErrClosed", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release after Close = %v", err)
	}
}
