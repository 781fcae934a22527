package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/redisstore"
)

// TestCounter: Count is INCRBY then EXPIRE on envoyproxy/ratelimit's key
// (the caller's key, then the window's start in Unix seconds), in order
// within a call, on a real redis-server and on a cluster.
func TestCounter(t *testing.T) {
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t, 3)
	for name, cfg := range map[string]redisstore.Config{"single": {URL: srv.URL()}, "cluster": {Addrs: cl.Addrs()}} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, nil, cfg)
			ctx := context.Background()
			now := time.Unix(1_772_445_665, 250_000_000) // 10:01:05.25 UTC: the minute started at ...660, the hour at ...600
			cs := []portero.Count{
				{Key: "edge_client_a_", Window: time.Minute, Add: 8, TTL: time.Minute + 7*time.Second},
				{Key: "edge_client_a_", Window: time.Minute, Add: 0},
				{Key: "edge_client_a_", Window: time.Minute, Add: 5},
				{Key: "edge_client_b_", Window: time.Second, Add: 1},
				{Key: "edge_client_a_", Window: time.Hour, Add: 2},
			}
			if err := s.Count(ctx, now, cs); err != nil {
				t.Fatal(err)
			}
			for i, want := range []uint64{8, 8, 13, 1, 2} {
				if cs[i].Value != want {
					t.Errorf("Count: counts[%d].Value = %d, want %d", i, cs[i].Value, want)
				}
			}
			// envoyproxy/ratelimit's keys, so that both count together.
			addr := srv.Addr()
			if name == "cluster" {
				addr = ownerOf(t, cl, "edge_client_a_1772445660")
			}
			if got, err := redistest.Do(addr, "GET", "edge_client_a_1772445660"); err != nil || got != "13" {
				t.Errorf("GET edge_client_a_1772445660 = %q, %v; want 13", got, err)
			}
			if name == "single" {
				ttl, err := redistest.Do(addr, "TTL", "edge_client_a_1772445660")
				if n, _ := strconv.Atoi(ttl); err != nil || n < 55 || n > 60 {
					t.Errorf("TTL = %q, %v; want the last EXPIRE's 60s", ttl, err)
				}
				for _, k := range []string{"edge_client_b_1772445665", "edge_client_a_1772445600"} {
					if got, _ := redistest.Do(addr, "EXISTS", k); got != "1" {
						t.Errorf("EXISTS %s = %q", k, got)
					}
				}
			}
			// The next minute is a new counter.
			next := []portero.Count{{Key: "edge_client_a_", Window: time.Minute, Add: 1}}
			if err := s.Count(ctx, now.Add(55*time.Second), next); err != nil || next[0].Value != 1 {
				t.Errorf("next minute: %d, %v; want 1", next[0].Value, err)
			}
			// As in envoyproxy/ratelimit, whose key is the window's start
			// alone, the hour's counter and the minute's share a key in the
			// hour's first minute.
			first := []portero.Count{{Key: "edge_client_c_", Window: time.Hour, Add: 2}, {Key: "edge_client_c_", Window: time.Minute, Add: 1}}
			if err := s.Count(ctx, time.Unix(1_772_445_605, 0), first); err != nil || first[1].Value != 3 {
				t.Errorf("first minute of the hour: %d, %v; want 3", first[1].Value, err)
			}
			bad := []portero.Count{{Key: "x_", Window: 1500 * time.Millisecond, Add: 1}}
			if err := s.Count(ctx, now, bad); err == nil {
				t.Error("a window of 1.5s: no error")
			}
			huge := []portero.Count{{Key: "x_", Window: time.Second, Add: 1 << 63}}
			if err := s.Count(ctx, now, huge); !errors.Is(err, redisstore.ErrScript) {
				t.Errorf("add 2^63: %v, want ErrScript", err)
			}
		})
	}
}

// ownerOf returns the address of the cluster node that holds key.
func ownerOf(t *testing.T, cl *redistest.Cluster, key string) string {
	t.Helper()
	for _, a := range cl.Addrs() {
		if got, err := redistest.Do(a, "GET", key); err == nil && got != "" && got[0] != '-' {
			return a
		}
	}
	t.Fatalf("no node holds %s", key)
	return ""
}

// TestCounterUnavailable: a Redis that is down is an error wrapping
// portero.ErrStoreUnavailable, so that the engine's failure policy answers.
func TestCounterUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, redisstore.Config{Timeout: 200 * time.Millisecond})
	srv.Kill()
	err := s.Count(context.Background(), time.Now(), []portero.Count{{Key: "k_", Window: time.Second, Add: 1}})
	if !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Errorf("Count with Redis down = %v, want ErrStoreUnavailable", err)
	}
}
