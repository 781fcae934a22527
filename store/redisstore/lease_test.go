package redisstore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/redisstore"
	"github.com/portero-rl/portero/store/storetest"
)

// TestLeaseConformance runs the lease conformance suite against a real
// redis-server in caller-clock mode: the same step tables and the same
// random traces as the memory store, compared with
// storetest.LeaseReference, and 40 concurrent acquisitions of 5 through
// the one atomic script.
func TestLeaseConformance(t *testing.T) {
	srv := redistest.Start(t)
	storetest.RunLeases(t, func(t *testing.T) portero.LeaseStore {
		return newStore(t, srv, redisstore.Config{Clock: redisstore.CallerClock})
	})
}

// TestLeaseServerClock: with Redis's clock a lease's expiry is Redis TIME
// plus the TTL, the set's own key expires with its last lease, and the last
// release deletes it.
func TestLeaseServerClock(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{})
	ctx := context.Background()
	rule := portero.ConcurrencyRule{Name: "api", Max: 2, TTL: 30 * time.Second}
	before := srv.Micros(t)
	l, d, err := s.Acquire(ctx, time.Time{}, rule, "tenant-a")
	if err != nil || !d.Allowed || d.Remaining != 1 || d.Limit != 2 {
		t.Fatalf("Acquire = %+v, %v", d, err)
	}
	after := srv.Micros(t)
	key := s.LeaseKey("api", "tenant-a")
	if !strings.HasSuffix(key, "{tenant-a}:lease:api") {
		t.Errorf("LeaseKey = %q", key)
	}
	members, err := redistest.Do(srv.Addr(), "ZRANGE", key, "0", "-1", "WITHSCORES")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(members, "\n")
	if len(f) != 2 {
		t.Fatalf("ZRANGE = %q, want one lease", members)
	}
	exp, _ := strconv.ParseInt(f[1], 10, 64)
	if exp < before+30_000_000 || exp > after+30_000_000 {
		t.Errorf("expiry %d µs, want Redis TIME + 30 s, in [%d, %d]", exp, before+30_000_000, after+30_000_000)
	}
	if pttl, _ := redistest.Do(srv.Addr(), "PTTL", key); pttl == "-1" || pttl == "-2" {
		t.Errorf("PTTL = %s, want the key to expire with its lease", pttl)
	}
	if err := l.Renew(ctx, time.Time{}); err != nil {
		t.Errorf("Renew = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
	if n, _ := redistest.Do(srv.Addr(), "EXISTS", key); n != "0" {
		t.Errorf("EXISTS after the last release = %s, want 0", n)
	}
	if err := l.Renew(ctx, time.Time{}); !errors.Is(err, portero.ErrLeaseLost) {
		t.Errorf("Renew after Release = %v, want ErrLeaseLost", err)
	}
}

// TestLeaseClosedClientStopsRenewing: an instance that holds a lease and
// then loses its client (Close: no more renewals) keeps the slot taken only
// until the lease's expiry on Redis's clock; then another instance gets it.
func TestLeaseClosedClientStopsRenewing(t *testing.T) {
	srv := redistest.Start(t)
	cfg := redisstore.Config{Prefix: "shared:"}
	a, b := newStore(t, srv, cfg), newStore(t, srv, cfg)
	ctx := context.Background()
	rule := portero.ConcurrencyRule{Name: "one", Max: 1, TTL: time.Second}
	l, d, err := a.Acquire(ctx, time.Time{}, rule, "k")
	if err != nil || !d.Allowed {
		t.Fatalf("a.Acquire = %+v, %v", d, err)
	}
	if err := l.Renew(ctx, time.Time{}); err != nil {
		t.Fatalf("Renew = %v", err)
	}
	exp := srv.Scores(t, a.LeaseKey("one", "k"))[0]
	a.Close(ctx)
	if err := l.Renew(ctx, time.Time{}); !errors.Is(err, portero.ErrClosed) {
		t.Errorf("Renew after Close = %v, want ErrClosed", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := srv.Micros(t)
		_, d, err := b.Acquire(ctx, time.Time{}, rule, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			if after := srv.Micros(t); after < exp {
				t.Errorf("slot came back at %d µs, before the lease's expiry %d", after, exp)
			}
			break
		}
		// Refused: the wait it names ends at the lease's expiry.
		if got := now + d.RetryAfter.Microseconds(); got > exp || d.RetryAfter > time.Second {
			t.Errorf("refused with RetryAfter %v at %d µs: ends at %d, past the expiry %d", d.RetryAfter, now, got, exp)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot did not come back within 10 s of a 1 s lease")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLeaseUnavailable: with Redis killed, Acquire decides nothing, as
// AllowAll does: no lease, no decision, an error wrapping
// ErrStoreUnavailable, counted as unanswered; a Redis lease cannot be
// renewed meanwhile. Then the engine, over the same dead Redis, applies its
// one failure policy to the leases: allow admits without a lease, deny
// refuses for the service's sake, local takes leases in the engine's memory
// with LocalShare of Max, error returns the error.
func TestLeaseUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	var unanswered atomic.Int64
	s := newStore(t, srv, redisstore.Config{
		Timeout:       50 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnUnavailable: func(redisstore.UnavailableCall) { unanswered.Add(1) },
	})
	ctx := context.Background()
	rule := portero.ConcurrencyRule{Name: "conc", Max: 4}
	held, _, err := s.Acquire(ctx, time.Now(), rule, "k")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()

	if l, d, err := s.Acquire(ctx, time.Now(), rule, "k"); l != nil || d != (portero.Decision{}) || !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Errorf("Acquire with Redis down = %v, %+v, %v; want nothing but an error wrapping ErrStoreUnavailable", l, d, err)
	}
	if err := held.Renew(ctx, time.Now()); !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Errorf("Renew of a Redis lease while Redis is down = %v, want ErrStoreUnavailable", err)
	}
	if unanswered.Load() == 0 || !s.Degraded() {
		t.Errorf("unanswered %d, degraded %v: want the unanswered call counted", unanswered.Load(), s.Degraded())
	}

	conc, err := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "conc"}, Concurrency: rule})
	if err != nil {
		t.Fatal(err)
	}
	hits := []engine.Hit{{Rule: conc, Key: "k", Cost: 1}}
	for _, pol := range portero.FailurePolicies {
		e, err := engine.New(engine.Options{Store: s, OnError: pol, LocalShare: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		var admitted, leases int
		var errs error
		for range 4 {
			var v engine.Verdict
			if err := e.Admit(ctx, time.Now(), hits, &v); err != nil {
				errs = err
				continue
			}
			if v.Results[0].Failure != pol {
				t.Errorf("%s: Failure = %q", pol, v.Results[0].Failure)
			}
			if v.Allowed {
				admitted++
			} else if pol == portero.FailDeny && !v.Unavailable() {
				t.Errorf("deny: a refusal that is not the service's (503)")
			}
			leases += len(v.Held())
		}
		want := map[portero.FailurePolicy][2]int{portero.FailAllow: {4, 0}, portero.FailDeny: {0, 0}, portero.FailLocal: {2, 2}, portero.FailError: {0, 0}}[pol]
		if admitted != want[0] || leases != want[1] {
			t.Errorf("%s: %d of 4 admitted holding %d leases, want %d holding %d", pol, admitted, leases, want[0], want[1])
		}
		if (pol == portero.FailError) != (errs != nil) || errs != nil && !errors.Is(errs, portero.ErrStoreUnavailable) {
			t.Errorf("%s: Admit error %v", pol, errs)
		}
	}
}

// TestLeaseConformanceCluster runs the lease suite on a real three-master
// Redis Cluster: each operation touches one key, so one slot, one node.
func TestLeaseConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := redistest.StartCluster(t, 3)
	storetest.RunLeases(t, func(t *testing.T) portero.LeaseStore {
		return newStore(t, nil, redisstore.Config{Addrs: c.Addrs(), Clock: redisstore.CallerClock})
	})
}

// TestLeasesForgottenByRestart: a Redis restarted without persistence (the
// tests run it with --save "" --appendonly no) forgets the leases as it
// forgets the counters. Two of Max 2 are held; after the restart two more
// are admitted — 2 × Max requests in flight until the first two end — and
// the first two are lost when they renew.
func TestLeasesForgottenByRestart(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	rule := portero.ConcurrencyRule{Name: "api", Max: 2, TTL: time.Minute}
	var held []portero.Lease
	for range 2 {
		l, d, err := s.Acquire(ctx, time.Now(), rule, "k")
		if err != nil || !d.Allowed {
			t.Fatalf("Acquire = %+v, %v", d, err)
		}
		held = append(held, l)
	}
	if _, d, err := s.Acquire(ctx, time.Now(), rule, "k"); err != nil || d.Allowed {
		t.Fatalf("a third lease of Max 2 = %+v, %v; want refused", d, err)
	}
	srv.Kill()
	srv.Restart()
	admitted := 0
	for deadline := time.Now().Add(30 * time.Second); admitted < 2; {
		_, d, err := s.Acquire(ctx, time.Now(), rule, "k")
		switch {
		case errors.Is(err, portero.ErrStoreUnavailable) && time.Now().Before(deadline):
			time.Sleep(20 * time.Millisecond) // the store reconnects by itself
		case err != nil:
			t.Fatalf("Acquire after the restart: %v", err)
		case !d.Allowed:
			t.Fatalf("lease %d after the restart refused (%+v): want the restarted Redis to know none", admitted+1, d)
		default:
			admitted++
		}
	}
	for i, l := range held {
		// Another of the client's connections may still meet the restart
		// (EOF): unavailable is not an answer, so ask again.
		err := l.Renew(ctx, time.Now())
		for deadline := time.Now().Add(30 * time.Second); errors.Is(err, portero.ErrStoreUnavailable) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			err = l.Renew(ctx, time.Now())
		}
		if !errors.Is(err, portero.ErrLeaseLost) {
			t.Errorf("lease %d taken before the restart: Renew = %v, want ErrLeaseLost", i+1, err)
		}
	}
}
