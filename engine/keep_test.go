package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
)

// countingLease records its renewals and releases; lost makes Renew fail
// with ErrLeaseLost.
type countingLease struct {
	mu               sync.Mutex
	renews, releases int
	lost             bool
}

func (l *countingLease) Renew(context.Context, time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renews++
	if l.lost {
		return portero.ErrLeaseLost
	}
	return nil
}

func (l *countingLease) Release(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releases++
	return nil
}

func (l *countingLease) counts() (renews, releases int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renews, l.releases
}

// TestKeeper: held leases are renewed every TTL/3 of the shortest lease
// (virtual time) until Release, which gives each back once and stops the
// renewals; a lost lease is reported and not renewed again; the request's
// cancellation does not stop the renewals.
func TestKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		short, long := &countingLease{}, &countingLease{lost: true}
		rs := engine.Rule{Rule: portero.Rule{Name: "short"}, Concurrency: portero.ConcurrencyRule{Max: 1, TTL: 3 * time.Second}}
		rl := engine.Rule{Rule: portero.Rule{Name: "long"}, Concurrency: portero.ConcurrencyRule{Max: 1, TTL: 30 * time.Second}}
		held := []engine.Held{{Rule: &rs, Key: "a", Lease: short}, {Rule: &rl, Key: "a", Lease: long}}
		var errs []error
		var mu sync.Mutex
		ctx, cancel := context.WithCancel(context.Background())
		k := engine.Keep(ctx, held, time.Now, func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() })
		held[0] = engine.Held{} // Keep copied them: the verdict's slice is reused
		cancel()
		time.Sleep(3500 * time.Millisecond) // renewals at 1 s, 2 s and 3 s
		synctest.Wait()
		if r, _ := short.counts(); r != 3 {
			t.Errorf("after 3.5 s the 3 s lease was renewed %d times, want 3 (every TTL/3)", r)
		}
		if r, _ := long.counts(); r != 1 {
			t.Errorf("the lost lease was renewed %d times, want 1 (not again once lost)", r)
		}
		mu.Lock()
		if len(errs) != 1 || !errors.Is(errs[0], portero.ErrLeaseLost) {
			t.Errorf("errors = %v, want one ErrLeaseLost", errs)
		}
		mu.Unlock()
		if got := k.Release(); len(got) != 2 {
			t.Errorf("Release returned %d leases, want 2", len(got))
		}
		if got := k.Release(); got != nil {
			t.Errorf("a second Release returned %v, want nil", got)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		for name, l := range map[string]*countingLease{"short": short, "long": long} {
			if r, rel := l.counts(); rel != 1 || name == "short" && r != 3 {
				t.Errorf("%s: %d renewals and %d releases after Release, want 3 (none more) and 1", name, r, rel)
			}
		}
		if engine.Keep(ctx, nil, time.Now, nil).Release() != nil {
			t.Error("a nil Keeper released something")
		}
	})
}
