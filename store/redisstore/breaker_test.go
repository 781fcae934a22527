package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/store/redisstore"
)

var breakerRule = portero.Rule{Name: "r", Algorithm: portero.TokenBucket, Limit: portero.Limit{Count: 1 << 30, Window: time.Hour}}

// TestLoadedHostKeepsBreakerClosed: on a CPU-starved host the kernel now
// and then leaves redis-server without a CPU for longer than the deadline,
// which looks to its clients exactly like SIGSTOP then SIGCONT, so that is
// how the test starves it. Every call in flight during such a stall
// misses its deadline at once and is decided by the failure policy: a run
// of consecutive failures, but a small share of the calls. The breaker,
// which opens on a share of failures over its window, must stay closed.
// The test counts calls, not time: 32 calls in flight on a frozen server
// all fail, three times among 200 calls each that it answers, in a window
// longer than the test (the breaker's ratio and minimum of calls are the
// defaults).
func TestLoadedHostKeepsBreakerClosed(t *testing.T) {
	srv := redistest.Start(t)
	log := &testenv.Buffer{}
	var unanswered atomic.Int64
	// Unbatched (Batch 1, as on a cluster): every caller has its own call
	// in flight, so a stall fails them all.
	s := newStore(t, srv, redisstore.Config{Timeout: 50 * time.Millisecond, Batch: 1, BreakerWindow: time.Hour,
		Logger:        slog.New(slog.NewTextHandler(log, nil)),
		OnUnavailable: func(redisstore.UnavailableCall) { unanswered.Add(1) }})
	call := func(key string) error {
		_, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: breakerRule, Key: key, Cost: 1}})
		if err != nil && !errors.Is(err, portero.ErrStoreUnavailable) {
			t.Fatalf("AllowAll: %v", err)
		}
		return err
	}
	const inFlight = 32
	for stall := range 3 {
		for i := range 200 {
			call(fmt.Sprint("k", i))
		}
		before := unanswered.Load()
		srv.Freeze()
		var wg sync.WaitGroup
		for i := range inFlight {
			wg.Go(func() {
				if call(fmt.Sprint("k", i)) == nil {
					t.Errorf("stall %d: a call on a frozen server was decided", stall)
				}
			})
		}
		wg.Wait()
		srv.Thaw()
		if n := unanswered.Load() - before; n != inFlight {
			t.Errorf("stall %d: %d calls decided by the failure policy, want the %d in flight", stall, n, inFlight)
		}
		if st := s.Stats(); st.Breaker != "closed" {
			t.Fatalf("stall %d of %d calls in flight among 200 answered opened the breaker: %+v", stall, inFlight, st)
		}
	}
	if strings.Contains(log.String(), "circuit breaker open") {
		t.Errorf("the breaker opened:\n%s", log)
	}
}
