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

// TestReplaySlidingCounterTie: a sliding-counter estimate of exactly L
// refuses, on the memory store and on Redis. L=60, W=1m: 60 requests in
// [0, 60), 25 at 60.5 … 84.5 s, then at 85 s the estimate is
// 60·35/60 + 25 = 60 (59.99999999999999 in float64), and the request passes
// 1 ns later.
func TestReplaySlidingCounterTie(t *testing.T) {
	srv := redistest.Start(t)
	var b strings.Builder
	b.WriteString("time,key\n")
	for i := range 60 {
		fmt.Fprintf(&b, "%d,k\n", i)
	}
	for i := range 25 {
		fmt.Fprintf(&b, "%d.5,k\n", 60+i)
	}
	b.WriteString("85,k\n")
	trace := writeFile(t, "tie.csv", b.String())
	args := []string{"sim", "replay", "--algorithm", "sliding-counter", "--limit", "60", "--window", "1m", "--trace", trace}
	for _, store := range []string{"memory", srv.URL()} {
		run := args
		if store != "memory" {
			run = append(run, "--store", store)
		}
		out, errs, code := runCmd(t, run...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", store, code, errs)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 87 {
			t.Fatalf("%s: %d lines, want a header and 86 decisions:\n%s", store, len(lines), head(out))
		}
		for _, l := range lines[1:86] {
			if !strings.Contains(l, ",true,") {
				t.Errorf("%s: %q refused; every request before 85 s passes", store, l)
			}
		}
		if last := lines[86]; last != "85,k,1,false,0,0.000000001" {
			t.Errorf("%s: at 85 s %q, want 85,k,1,false,0,0.000000001 (an estimate of exactly 60 refuses)", store, last)
		}
	}
}
