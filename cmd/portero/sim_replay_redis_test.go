package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
)

// TestReplayOnRedisMatchesMemory: `sim replay --store redis://…` prints
// exactly what the memory store prints, for every algorithm.
func TestReplayOnRedisMatchesMemory(t *testing.T) {
	srv := redistest.Start(t)
	r := rand.New(rand.NewPCG(9, 10))
	var b strings.Builder
	b.WriteString("time,key,cost\n")
	ms := int64(0)
	for range 200 {
		ms += r.Int64N(120)
		fmt.Fprintf(&b, "%d.%03d,k%d,%d\n", ms/1000, ms%1000, r.IntN(3), 1+r.IntN(2))
	}
	trace := writeFile(t, "trace.csv", b.String())
	for _, alg := range portero.Algorithms {
		args := []string{"sim", "replay", "--algorithm", string(alg), "--limit", "5", "--window", "1s", "--trace", trace}
		mem, errs, code := runCmd(t, args...)
		if code != 0 {
			t.Fatalf("%s on memory: exit %d: %s", alg, code, errs)
		}
		red, errs, code := runCmd(t, append(args, "--store", srv.URL())...)
		if code != 0 {
			t.Fatalf("%s on redis: exit %d: %s", alg, code, errs)
		}
		if mem != red {
			t.Errorf("%s: redis output differs from memory:\nmemory:\n%s\nredis:\n%s", alg, head(mem), head(red))
		}
		if !strings.Contains(mem, ",false,") || !strings.Contains(mem, ",true,") {
			t.Errorf("%s: the trace should both admit and refuse:\n%s", alg, head(mem))
		}
	}
	if _, _, code := runCmd(t, "sim", "replay", "--algorithm", "gcra", "--limit", "5", "--window", "1s", "--trace", trace, "--store", "redis://127.0.0.1:1/0"); code == 0 {
		t.Errorf("replay on an unreachable redis: exit 0, want an error")
	}
	if _, _, code := runCmd(t, "sim", "replay", "--algorithm", "gcra", "--limit", "5", "--window", "1s", "--trace", trace, "--store", "memcache://x"); code != 2 {
		t.Errorf("replay --store memcache://x: exit %d, want 2", code)
	}
}

func head(s string) string {
	lines := strings.SplitN(s, "\n", 12)
	return strings.Join(lines[:min(len(lines), 11)], "\n")
}
