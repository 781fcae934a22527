package server

import (
	"context"
	"testing"
	"time"

	"github.com/portero-rl/portero"
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

func (b *blockingStore) Peek(context.Context, portero.Rule, string, time.Time) (portero.Decision, error) {
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
	old.Peek(context.Background(), portero.Rule{}, "k", time.Now())
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
