package redisstore

import (
	"embed"
	"fmt"
	"strings"

	"github.com/portero-rl/portero"
	"github.com/redis/rueidis"
)

// The scripts are data: one Lua file per algorithm, a prelude of exact time
// arithmetic, a one-hit driver and a driver that decides every hit of a
// call and commits all or none.
//
//go:embed lua/*.lua
var luaFS embed.FS

// algFiles maps each algorithm to its Lua file.
var algFiles = map[portero.Algorithm]string{
	portero.FixedWindow:         "fixed_window.lua",
	portero.FixedWindowAnchored: "fixed_window_anchored.lua",
	portero.SlidingLog:          "sliding_log.lua",
	portero.SlidingCounter:      "sliding_counter.lua",
	portero.TokenBucket:         "token_bucket.lua",
	portero.LeakyMeter:          "leaky_meter.lua",
	portero.GCRA:                "gcra.lua",
	portero.LeakyQueue:          "leaky_queue.lua",
	calendarAlg:                 "fixed_window_calendar.lua",
}

// scriptAlgs are the script functions: every algorithm, and the calendar
// quota's.
var scriptAlgs = append(append([]portero.Algorithm(nil), portero.Algorithms...), calendarAlg)

func readLua(name string) string {
	b, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic("redisstore: embedded script missing: " + name) // a build error, not a runtime one
	}
	return string(b)
}

// Source returns the Lua source of the script that decides calls of several
// hits of the given algorithms (all of them when none is given): the
// prelude, each algorithm's file and the multi-hit driver. The store runs it
// with EVALSHA for calls of several hits and for the sliding log; exposed
// for documentation and for running it by hand (redis-benchmark).
func Source(algs ...portero.Algorithm) string {
	if len(algs) == 0 {
		algs = scriptAlgs
	}
	return assemble(algs, "driver.lua")
}

// HitSource returns the Lua source of the script that decides a call of one
// hit of algorithm a: the prelude, the algorithm's file and the one-hit
// driver, which has no loop and builds no table but its reply. It is what
// the store runs for such calls (the common case), except for the sliding
// log, whose one-hit script is Source(SlidingLog). The ARGV layout and the
// reply are those of Source's script for one hit.
func HitSource(a portero.Algorithm) string {
	if a == portero.SlidingLog {
		return Source(a)
	}
	return assemble([]portero.Algorithm{a}, "one.lua")
}

func assemble(algs []portero.Algorithm, driver string) string {
	var b strings.Builder
	b.WriteString(readLua("prelude.lua"))
	for _, a := range algs {
		f, ok := algFiles[a]
		if !ok {
			panic(fmt.Sprintf("redisstore: no script for algorithm %q", a))
		}
		b.WriteString("\n")
		b.WriteString(readLua(f))
	}
	b.WriteString("\n")
	b.WriteString(readLua(driver))
	return b.String()
}

// scripts holds, per algorithm, the one-hit script and a multi-hit script
// for calls whose hits share the algorithm, and one multi-hit script with
// every algorithm for mixed calls.
type scripts struct {
	hit map[portero.Algorithm]*rueidis.Lua
	one map[portero.Algorithm]*rueidis.Lua
	all *rueidis.Lua
	// batch decides a batch of independent one-hit calls (batch.lua).
	batch *rueidis.Lua
}

// BatchSource returns the Lua source of the script that decides a batch of
// independent one-hit calls, each exactly as HitSource's script would, in
// order (see Config.Batch): the prelude, every algorithm but the sliding
// log, and the batch driver.
func BatchSource() string {
	var algs []portero.Algorithm
	for _, a := range scriptAlgs {
		if a != portero.SlidingLog {
			algs = append(algs, a)
		}
	}
	return assemble(algs, "batch.lua")
}

func newScripts() *scripts {
	s := &scripts{
		hit:   map[portero.Algorithm]*rueidis.Lua{},
		one:   map[portero.Algorithm]*rueidis.Lua{},
		all:   rueidis.NewLuaScript(Source()),
		batch: rueidis.NewLuaScript(BatchSource()),
	}
	for _, a := range scriptAlgs {
		s.hit[a] = rueidis.NewLuaScript(HitSource(a))
		s.one[a] = rueidis.NewLuaScript(Source(a))
	}
	return s
}

func (s *scripts) pick(algs []portero.Algorithm) *rueidis.Lua {
	if len(algs) == 1 {
		return s.hit[algs[0]]
	}
	for _, a := range algs[1:] {
		if a != algs[0] {
			return s.all
		}
	}
	return s.one[algs[0]]
}
