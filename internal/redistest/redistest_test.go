package redistest

import (
	"strings"
	"testing"
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
