package redistest

import (
	"strings"
	"testing"
	"time"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	if r, err := Do(s.Addr(), "SET", "k", "v"); err != nil || r != "OK" {
		t.Fatalf("SET = %q, %v; want OK", r, err)
	}
	if r, err := Do(s.Addr(), "CONFIG", "GET", "appendonly"); err != nil || !strings.HasSuffix(r, "no") {
		t.Fatalf("CONFIG GET appendonly = %q, %v; want no", r, err)
	}
	s.Kill()
	if _, err := Do(s.Addr(), "PING"); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	s.Restart()
	if r, err := Do(s.Addr(), "GET", "k"); err != nil || r != "" {
		t.Fatalf("GET after restart = %q, %v; want empty (no persistence)", r, err)
	}
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start-up takes a second or two")
	}
	c := StartCluster(t, 3)
	for _, a := range c.Addrs() {
		info, err := Do(a, "CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_slots_assigned:16384") {
			t.Fatalf("CLUSTER INFO on %s = %q, %v", a, info, err)
		}
	}
}

// A replicated cluster: each master has its replica, and when a master
// dies its replica takes its slots.
func TestReplicatedCluster(t *testing.T) {
	c := StartReplicatedCluster(t, 3, 1)
	for i, rs := range c.Replicas {
		if role, err := Do(rs[0].Addr(), "ROLE"); err != nil || !strings.HasPrefix(role, "slave") {
			t.Fatalf("replica of master %d: ROLE = %q, %v", i, role, err)
		}
	}
	c.Nodes[1].Kill()
	if p := c.WaitPromoted(t, 1, 30*time.Second); p != c.Replicas[1][0] {
		t.Fatalf("promoted %s, want %s", p.Addr(), c.Replicas[1][0].Addr())
	}
}

func TestSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("sentinel start-up and failover take a few seconds")
	}
	t0 := time.Now()
	s := StartSentinel(t, 1, 3)
	t.Logf("ready in %v", time.Since(t0).Round(time.Millisecond))
	old, err := s.MasterAddr()
	if err != nil || old != s.Master.Addr() {
		t.Fatalf("MasterAddr = %q, %v; want %s", old, err, s.Master.Addr())
	}
	if _, err := Do(old, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	s.WaitSynced(t, old, 5*time.Second)
	start := time.Now()
	s.Master.Freeze()
	promoted := s.WaitFailover(t, old, 30*time.Second)
	t.Logf("failover in %v", time.Since(start).Round(time.Millisecond))
	if promoted != s.Replicas[0].Addr() {
		t.Fatalf("promoted %s, want the replica %s", promoted, s.Replicas[0].Addr())
	}
	if v, err := Do(promoted, "GET", "k"); err != nil || v != "v" {
		t.Fatalf("GET on the new master = %q, %v; want the replicated v", v, err)
	}
}
