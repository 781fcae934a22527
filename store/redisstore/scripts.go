package redisstore

import (
	"embed"
	"fmt"
	"strings"

	"github.com/portero-rl/portero"
	"github.com/redis/rueidis"
)

// The scripts are data: one Lua file per algorithm, a prelude of exact time
// arithmetic and a driver that decides every hit and commits all or none.
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
}

func readLua(name string) string {
	b, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic("redisstore: embedded script missing: " + name) // a build error, not a runtime one
	}
	return string(b)
}

// Source returns the Lua source of the script that decides hits of the given
// algorithms (all of them when none is given): the prelude, each
// algorithm's file and the driver. It is what the store runs with EVALSHA,
// exposed for documentation and for running it by hand (redis-benchmark).
func Source(algs ...portero.Algorithm) string {
	if len(algs) == 0 {
		algs = portero.Algorithms
	}
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
	b.WriteString(readLua("driver.lua"))
	return b.String()
}

// scripts holds one script per algorithm, for calls whose hits share an
// algorithm (the common case: smaller to load), and one with every
// algorithm for mixed calls.
type scripts struct {
	one map[portero.Algorithm]*rueidis.Lua
	all *rueidis.Lua
}

func newScripts() *scripts {
	s := &scripts{one: map[portero.Algorithm]*rueidis.Lua{}, all: rueidis.NewLuaScript(Source())}
	for _, a := range portero.Algorithms {
		s.one[a] = rueidis.NewLuaScript(Source(a))
	}
	return s
}

func (s *scripts) pick(algs []portero.Algorithm) *rueidis.Lua {
	for _, a := range algs[1:] {
		if a != algs[0] {
			return s.all
		}
	}
	return s.one[algs[0]]
}
