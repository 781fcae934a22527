package server

import (
	"context"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
)

// blockingStore counts its calls and holds each until released.
type blockingStore struct {
	calls   chan struct{}
	release chan struct{}
}

func (b *blockingStore) AllowAll(ctx context.Context, _ time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	b.calls <- struct{}{}
	<-b.release
	return make([]portero.Decision, len(hits)), nil
}

func (b *blockingStore) Peek(context.Context, portero.Rule, string, time.Time, int64) (portero.Decision, error) {
	b.calls <- struct{}{}
	<-b.release
	return portero.Decision{}, nil
}

func (b *blockingStore) Close(context.Context) error { return nil }

// TestLeasedRetire: a retired store is idle only once the calls in it
// have returned, and a call that reaches it after the retirement goes to
// its successor.
func TestLeasedRetire(t *testing.T) {
	oldS := &blockingStore{calls: make(chan struct{}, 4), release: make(chan struct{})}
	newS := &blockingStore{calls: make(chan struct{}, 4), release: make(chan struct{})}
	close(newS.release)
	old, next := newLeased(oldS), newLeased(newS)
	done := make(chan struct{})
	go func() { old.AllowAll(context.Background(), time.Now(), nil); close(done) }()
	<-oldS.calls // the call is in the old store
	idle := old.retire(next)
	select {
	case <-idle:
		t.Fatal("idle while a call is still in the store")
	default:
	}
	// A late call, from a request that took the old store before the
	// reload: it runs in the new one.
	old.AllowAll(context.Background(), time.Now(), nil)
	select {
	case <-newS.calls:
	default:
		t.Fatal("a call after retire did not reach the successor")
	}
	// A late Peek too (the engine's check-only and can-never-pass hits).
	old.Peek(context.Background(), portero.Rule{}, "k", time.Now(), 1)
	select {
	case <-newS.calls:
	default:
		t.Fatal("a Peek after retire did not reach the successor")
	}
	if len(oldS.calls) != 0 {
		t.Fatal("a call after retire ran in the retired store")
	}
	close(oldS.release)
	<-done
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatal("not idle after its last call returned")
	}
	// Retiring a store with no call in it is idle at once.
	select {
	case <-newLeased(newS).retire(next):
	default:
		t.Fatal("a store without calls is not idle when retired")
	}
}

// TestLeasedHoldsLeases: a retired store stays open while a request holds
// one of its concurrency leases (its renewals and its release must reach
// it), and is idle once the lease is given back, however many times; an
// Acquire after the retirement goes to its successor.
func TestLeasedHoldsLeases(t *testing.T) {
	oldM, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	newM, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer oldM.Close(context.Background())
	defer newM.Close(context.Background())
	old, next := newLeased(oldM), newLeased(newM)
	rule := portero.ConcurrencyRule{Name: "c", Max: 1}
	lease, d, err := old.Acquire(context.Background(), time.Now(), rule, "k")
	if err != nil || !d.Allowed {
		t.Fatalf("Acquire = %+v, %v", d, err)
	}
	idle := old.retire(next)
	select {
	case <-idle:
		t.Fatal("idle while a lease of the store is held")
	default:
	}
	// A late Acquire is the successor's: its slot is free there.
	if l2, d, err := old.Acquire(context.Background(), time.Now(), rule, "k"); err != nil || !d.Allowed {
		t.Errorf("a late Acquire = %+v, %v; want the successor's free slot", d, err)
	} else {
		l2.Release(context.Background())
	}
	if err := lease.Renew(context.Background(), time.Now()); err != nil {
		t.Errorf("renewing the held lease in the retired store: %v", err)
	}
	lease.Release(context.Background())
	lease.Release(context.Background())
	select {
	case <-idle:
	default:
		t.Fatal("not idle once the lease was given back")
	}
	if old.inflight.Load() != 0 {
		t.Errorf("in flight %d after a double release, want 0", old.inflight.Load())
	}
}
