package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/store/redisstore"
	"github.com/sony/gobreaker/v2"
)

// failureRig is a store on a server the test can kill, freeze and
// restart, with one rule per failure policy, each decided by an engine of
// that policy (the store reports failures; the engine decides).
type failureRig struct {
	srv                 *redistest.Server
	store               *redisstore.Store
	open, closed, local portero.Rule
	engines             map[string]*engine.Engine // by rule name
	rules               map[string]*engine.Rule
	unanswered          atomic.Int64
	log                 *testenv.Buffer

	mu     sync.Mutex
	causes []error // why Redis did not decide each call that fell back
}

const rigTimeout = 50 * time.Millisecond

func newFailureRig(t *testing.T) *failureRig {
	r := &failureRig{srv: redistest.Start(t), log: &testenv.Buffer{}}
	lim := portero.Limit{Count: 10, Window: time.Hour}
	r.open = portero.Rule{Name: "open", Algorithm: portero.FixedWindow, Limit: lim}
	r.closed = portero.Rule{Name: "closed", Algorithm: portero.TokenBucket, Limit: lim}
	r.local = portero.Rule{Name: "local", Algorithm: portero.SlidingLog, Limit: lim}
	r.store = newStore(t, r.srv, redisstore.Config{
		Timeout:         rigTimeout,
		BreakerMinCalls: 3,
		BreakerOpen:     300 * time.Millisecond,
		Logger:          slog.New(slog.NewTextHandler(r.log, nil)),
		OnUnavailable: func(f redisstore.UnavailableCall) {
			r.unanswered.Add(1)
			r.mu.Lock()
			r.causes = append(r.causes, f.Err)
			r.mu.Unlock()
		},
	})
	r.engines, r.rules = map[string]*engine.Engine{}, map[string]*engine.Rule{}
	for rule, pol := range map[portero.Rule]portero.FailurePolicy{r.open: portero.FailAllow, r.closed: portero.FailDeny, r.local: portero.FailLocal} {
		e, err := engine.New(engine.Options{Store: r.store, OnError: pol, LocalShare: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		er, err := engine.NewRule(engine.Rule{Rule: rule})
		if err != nil {
			t.Fatal(err)
		}
		r.engines[rule.Name], r.rules[rule.Name] = e, er
	}
	return r
}

// call decides one hit through the rule's engine and returns its result.
func (r *failureRig) call(t *testing.T, rule portero.Rule, key string) engine.Result {
	t.Helper()
	var v engine.Verdict
	err := r.engines[rule.Name].Decide(context.Background(), time.Now(), []engine.Hit{{Rule: r.rules[rule.Name], Key: key, Cost: 1}}, &v)
	if err != nil {
		t.Fatalf("%s: %v", rule.Name, err)
	}
	return v.Results[0]
}

// causesSince returns why Redis did not decide the calls that fell back
// since the n-th.
func (r *failureRig) causesSince(n int) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.causes[n:])
}

func (r *failureRig) numCauses() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.causes)
}

// waitOpen makes calls until the breaker opens: it opens once failures
// are at least half of the calls that ended in its window, so after traffic
// that Redis answered it takes a while of failures.
func (r *failureRig) waitOpen(t *testing.T) {
	t.Helper()
	start := time.Now()
	for r.store.Stats().Breaker != "open" {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("breaker not open after 10 s of failures: %+v", r.store.Stats())
		}
		r.store.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: r.open, Key: "until-open", Cost: 1}})
	}
	t.Logf("breaker open %v after the outage began", time.Since(start).Round(time.Millisecond))
}

// checkPolicies asserts what each policy does while Redis is down, that
// every call that asked Redis was ended by the deadline or the failed
// connection, and that the calls made once the breaker is open do not ask
// Redis (but for the breaker's probes, one per BreakerOpen).
func (r *failureRig) checkPolicies(t *testing.T, key string) {
	t.Helper()
	from := r.numCauses()
	// The store itself decides nothing while Redis is down: an error, and
	// no decision beside it.
	ds, err := r.store.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: r.closed, Key: key, Cost: 1}})
	if ds != nil || !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Fatalf("AllowAll while Redis is down = %+v, %v; want no decision and ErrStoreUnavailable", ds, err)
	}
	for i := 0; i < 12; i++ {
		res := r.call(t, r.open, key)
		if !res.Decision.Allowed || res.Failure != portero.FailAllow {
			t.Fatalf("allow while Redis is down: %+v; want allowed by the failure policy", res)
		}
	}
	for i := 0; i < 5; i++ {
		res := r.call(t, r.closed, key)
		if res.Decision.Allowed || res.Failure != portero.FailDeny {
			t.Fatalf("deny while Redis is down: %+v; want refused by the failure policy", res)
		}
	}
	admitted := 0
	for i := 0; i < 12; i++ {
		res := r.call(t, r.local, key)
		if res.Failure != portero.FailLocal {
			t.Fatalf("local while Redis is down: %+v; want decided by the local failure policy", res)
		}
		if res.Decision.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("local failure policy with share 0.5 of 10 admitted %d of 12, want 5", admitted)
	}
	open := 0
	causes := r.causesSince(from)
	for _, err := range causes {
		switch {
		case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
			open++
		case !errors.Is(err, portero.ErrStoreUnavailable):
			t.Errorf("a call fell back for %v: want an unavailable store", err)
		}
	}
	if open*2 < len(causes) {
		t.Errorf("%d of %d calls with the breaker open asked Redis: want only its probes", len(causes)-open, len(causes))
	}
	if st := r.store.Stats(); !st.Degraded || st.Breaker != "open" {
		t.Errorf("stats while down: %+v, want degraded with the breaker open", st)
	}
	if !r.store.Degraded() {
		t.Error("Degraded() = false while Redis is down")
	}
}

// waitExact waits until Redis decides again and then checks that a fresh
// key is limited exactly, by the shared store.
func (r *failureRig) waitExact(t *testing.T, key string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		res := r.call(t, r.closed, "probe-"+key)
		if res.Failure == "" && !r.store.Stats().Degraded {
			if r.store.Degraded() {
				t.Error("Degraded() = true after a call Redis decided")
			}
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("Redis decisions did not resume within 10 s: %+v", r.store.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	for _, rule := range []portero.Rule{r.open, r.closed, r.local} {
		// A call that misses the deadline on a loaded machine is rightly
		// decided by the failure policy; such a round says nothing about
		// the shared store, so it is repeated on a fresh key (Stats counts
		// the unanswered). The round that Redis decided alone must be exact.
		exact := false
		for try := 0; try < 3 && !exact; try++ {
			before := r.store.Stats().Unavailable
			n := 0
			for i := 0; i < 15; i++ {
				res := r.call(t, rule, fmt.Sprintf("after-%s-%d", key, try))
				if res.Decision.Allowed {
					n++
				}
			}
			if fb := r.store.Stats().Unavailable - before; fb > 0 {
				t.Logf("%s after recovery, try %d: %d of 15 calls missed the deadline and fell back; again", rule.Name, try, fb)
				continue
			}
			exact = true
			if n != 10 {
				t.Errorf("%s after recovery admitted %d of 15, want exactly 10", rule.Name, n)
			}
		}
		if !exact {
			t.Errorf("%s after recovery: every round had decisions of the failure policy", rule.Name)
		}
	}
	return took
}

// TestKillAndRestart kills redis-server in the middle of traffic, checks
// every policy and the latency bound, restarts it, and checks that exact
// shared limiting resumes by itself within seconds.
func TestKillAndRestart(t *testing.T) {
	r := newFailureRig(t)
	// Traffic in the background while the server dies.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ds, err := r.store.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: r.open, Key: "bg", Cost: 1}})
				if err != nil && (ds != nil || !errors.Is(err, portero.ErrStoreUnavailable)) {
					t.Errorf("background call: %v, %v; want a decision or an unavailable store's error alone", ds, err)
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	r.srv.Kill()
	time.Sleep(100 * time.Millisecond)
	r.waitOpen(t)
	r.checkPolicies(t, "kill")
	close(stop)
	wg.Wait()
	r.srv.Restart()
	took := r.waitExact(t, "kill")
	t.Logf("exact limiting resumed %v after the restart", took)
	if r.unanswered.Load() == 0 {
		t.Error("OnUnavailable was never called")
	}
	for _, want := range []string{"redis unavailable", "circuit breaker open", "exact shared limiting resumed"} {
		if !strings.Contains(r.log.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, r.log.String())
		}
	}
}

// TestFrozen freezes redis-server with SIGSTOP (a hang: connections open,
// nothing answered): decisions wait no longer than the deadline, the
// breaker opens, and limiting resumes after SIGCONT.
func TestFrozen(t *testing.T) {
	r := newFailureRig(t)
	// Warm up (load the scripts): on a loaded machine the first call may
	// miss its deadline, and the failure policy then rightly decides it.
	for try := 0; r.call(t, r.closed, "warm").Failure != ""; try++ {
		if try == 20 {
			t.Fatal("20 warm-up calls decided by the failure policy: Redis never answered in time")
		}
	}
	r.srv.Freeze()
	r.waitOpen(t)
	r.checkPolicies(t, "frozen")
	r.srv.Thaw()
	took := r.waitExact(t, "frozen")
	t.Logf("exact limiting resumed %v after SIGCONT", took)
}
