package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/portero-rl/portero"
	"github.com/redis/rueidis"
)

// The scripts are data: one Lua file per algorithm, a prelude of exact time
// arithmetic, and three drivers, Lua functions of (KEYS, ARGV): one for a
// call of one hit, all for several hits (all or none), batch for a batch of
// one-hit calls.
//
// Where the server has functions (Redis 7.0 and later) the store loads all
// of it as one library, named after a hash of its source, and calls the
// drivers with FCALL, so that the prelude and the algorithms are built once
// rather than at every call (scripts/redis-script-ir.sh counts the
// difference). A server without functions, or an ACL that forbids them,
// gets the same drivers as scripts run by hash.
//
//go:embed lua/*.lua
var luaFS embed.FS

// algFile is the Lua file of an algorithm: its name with underscores.
func algFile(a portero.Algorithm) string { return strings.ReplaceAll(string(a), "-", "_") + ".lua" }

// scriptAlgs are the script functions: every algorithm, and the calendar
// quota's.
var scriptAlgs = append(append([]portero.Algorithm(nil), portero.Algorithms...), calendarAlg)

// noP3 are the script functions that do not read p3: the common call
// leaves it out for them (see script.Exec). A function not listed gets it.
var noP3 = map[string]bool{
	string(portero.FixedWindow): true, string(portero.FixedWindowAnchored): true, string(portero.SlidingCounter): true,
	string(portero.TokenBucket): true, string(portero.LeakyMeter): true, string(portero.GCRA): true,
}

// A driver is a Lua file and the name of the function it defines.
type driver struct{ file, fn string }

var (
	oneDriver   = driver{"one.lua", "one"}
	allDriver   = driver{"driver.lua", "all"}
	batchDriver = driver{"batch.lua", "batch"}
	takeDriver  = driver{"take.lua", "take"}
	// hitFn is one.lua's second function: the one-hit call in its common
	// form, with only the arguments that vary (see script.Exec).
	hitFn = "hit"
)

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
// with EVALSHA, where the server has no functions, for calls of several hits
// and for the sliding log; exposed for documentation and for running it by
// hand (redis-benchmark).
func Source(algs ...portero.Algorithm) string {
	if len(algs) == 0 {
		algs = scriptAlgs
	}
	return assemble(algs, allDriver)
}

// HitSource returns the Lua source of the script that decides a call of one
// hit of algorithm a: the prelude, the algorithm's file and the one-hit
// driver, which has no loop and builds no table but its reply. It is what
// the store runs with EVALSHA for such calls (the common case) where the
// server has no functions, except for the sliding log, whose one-hit script
// is Source(SlidingLog). The ARGV layout and the reply are those of
// Source's script for one hit.
func HitSource(a portero.Algorithm) string {
	if a == portero.SlidingLog {
		return Source(a)
	}
	return assemble([]portero.Algorithm{a}, oneDriver)
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
	return assemble(algs, batchDriver)
}

// assemble returns a script: the prelude, the algorithms, the driver and a
// call of the driver with the script's KEYS and ARGV.
func assemble(algs []portero.Algorithm, d driver) string {
	var b strings.Builder
	writeBody(&b, algs, true, d)
	fmt.Fprintf(&b, "\nreturn %s(KEYS, ARGV)\n", d.fn)
	return b.String()
}

// writeBody writes the prelude, the algorithms and the drivers. A script
// lives for one call, so in one (script true) the prelude's cache of
// parameters would only cost: param is plain tonumber there.
func writeBody(b *strings.Builder, algs []portero.Algorithm, script bool, drivers ...driver) {
	b.WriteString(readLua("prelude.lua"))
	if script {
		b.WriteString("param = tonumber\n")
	}
	for _, a := range algs {
		b.WriteString("\n")
		b.WriteString(readLua(algFile(a)))
	}
	for _, d := range drivers {
		b.WriteString("\n")
		b.WriteString(readLua(d.file))
	}
}

// Library returns the source of the function library the store loads where
// the server has functions, and its name; the drivers are the functions
// NAME_one (a call of one hit), NAME_all (several hits, all or none; and
// any call of the sliding log), NAME_batch and NAME_take, with the KEYS
// and ARGV of HitSource's, Source's, BatchSource's and TakeSource's
// scripts, and NAME_hit, NAME_one for a call with the server's clock,
// counted, with no TTL floor, whose ARGV is only the hit's algorithm,
// cost, p1, p2 and (but for the algorithms that do not read it) p3. The
// name is "portero_" and 12 hexadecimal digits of the SHA-1 of the
// source's body.
func Library() (src, name string) { return librarySource() }

var librarySource = sync.OnceValues(func() (string, string) {
	var b strings.Builder
	writeBody(&b, scriptAlgs, false, oneDriver, allDriver, batchDriver, takeDriver)
	sum := sha1.Sum([]byte(b.String()))
	name := "portero_" + hex.EncodeToString(sum[:6])
	for _, fn := range []string{oneDriver.fn, hitFn, allDriver.fn, batchDriver.fn, takeDriver.fn} {
		fmt.Fprintf(&b, "\nredis.register_function('%s_%s', %s)", name, fn, fn)
	}
	return "#!lua name=" + name + "\n" + b.String() + "\n", name
})

// library is the function library as one store loads it.
type library struct {
	src, name string
	// off is set once the server turned FUNCTION LOAD down (no functions,
	// or an ACL without it): from then on the store runs scripts by hash.
	off atomic.Bool

	mu      sync.Mutex
	loading chan struct{} // closed when the load in flight ends; nil when none
	err     error         // the outcome of the last load
}

// load loads the library on every node of c, once for all the callers
// that found it missing meanwhile: the others wait for that load or for
// their own ctx, whichever ends first.
func (l *library) load(ctx context.Context, c rueidis.Client) error {
	l.mu.Lock()
	if ch := l.loading; ch != nil {
		l.mu.Unlock()
		select {
		case <-ch:
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ch := make(chan struct{})
	l.loading = ch
	l.mu.Unlock()
	err := l.loadNodes(ctx, c)
	l.mu.Lock()
	l.err, l.loading = err, nil
	l.mu.Unlock()
	close(ch)
	return err
}

// loadNodes sends FUNCTION LOAD REPLACE to every node. A replica refuses
// (READONLY): its primary replicates the library to it.
func (l *library) loadNodes(ctx context.Context, c rueidis.Client) error {
	var first error
	for _, n := range c.Nodes() {
		err := n.Do(ctx, n.B().FunctionLoad().Replace().FunctionCode(l.src).Build()).Error()
		if err == nil {
			continue
		}
		if re, ok := rueidis.IsRedisErr(err); ok {
			if strings.HasPrefix(re.Error(), "READONLY") {
				continue
			}
			l.off.Store(true)
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// missing reports whether err says that the server has no such function:
// the library is not loaded there (a new, restarted or flushed server), or
// the server has no functions at all.
func missing(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return false
	}
	m := strings.TrimPrefix(re.Error(), "ERR ") // Redis 7.0 sends "Function not found" bare
	return strings.HasPrefix(m, "Function not found") || strings.HasPrefix(m, "unknown command")
}

// denied reports whether err is an ACL's refusal.
func denied(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "NOPERM")
}

// script is one driver of the library, with the same driver as a script run
// by hash for a server without functions.
type script struct {
	lib  *library
	fn   string       // the driver's function in lib
	hit  string       // for the one-hit driver: NAME_hit
	eval *rueidis.Lua // the same driver as a script
}

// Exec runs the driver with FCALL, loading the library where it is missing,
// or with EVALSHA (loading the script on NOSCRIPT) where functions are off.
// It has rueidis.Lua.Exec's signature, which the store calls, and takes the
// drivers' ARGV; a one-hit call with the server's clock, counted, with no
// TTL floor (the common call) goes to NAME_hit with the five arguments
// that vary, or four for the functions that do not read p3 (noP3): every
// argument costs Redis about as much as a strtod.
func (s *script) Exec(ctx context.Context, c rueidis.Client, keys, args []string) rueidis.RedisResult {
	if !s.lib.off.Load() {
		fn, fargs := s.fn, args
		if s.hit != "" && len(args) == 10 && args[0] == "server" && args[3] == "1" && args[4] == "0" {
			end := 10 // algorithm, cost, p1, p2, p3
			if noP3[args[5]] {
				end = 9
			}
			fn, fargs = s.hit, args[5:end]
		}
		fcall := func() rueidis.RedisResult {
			return c.Do(ctx, c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(fargs...).Build())
		}
		r := fcall()
		switch err := r.Error(); {
		case denied(err): // an ACL that allows scripts but not FCALL
			s.lib.off.Store(true)
			return s.eval.Exec(ctx, c, keys, args)
		case !missing(err):
			return r
		}
		err := s.lib.load(ctx, c)
		if err == nil {
			return fcall()
		}
		if !s.lib.off.Load() {
			return rueidis.NewErrorResult(err)
		}
	}
	return s.eval.Exec(ctx, c, keys, args)
}

// scripts holds, per algorithm, the one-hit driver and a multi-hit driver
// for calls whose hits share the algorithm, one multi-hit driver with every
// algorithm for mixed calls, and the batch driver. As functions they are
// the library's three; as scripts, each holds only the algorithms it needs.
type scripts struct {
	lib *library
	hit map[portero.Algorithm]*script
	one map[portero.Algorithm]*script
	all *script
	// batch decides a batch of independent one-hit calls (batch.lua).
	batch *script
	// take takes a leased budget (take.lua, take.go).
	take *script
}

func newScripts() *scripts {
	src, name := Library()
	lib := &library{src: src, name: name}
	mk := func(d driver, eval string) *script {
		return &script{lib: lib, fn: name + "_" + d.fn, eval: rueidis.NewLuaScript(eval)}
	}
	s := &scripts{
		lib:   lib,
		hit:   map[portero.Algorithm]*script{},
		one:   map[portero.Algorithm]*script{},
		all:   mk(allDriver, Source()),
		batch: mk(batchDriver, BatchSource()),
		take:  mk(takeDriver, TakeSource()),
	}
	for _, a := range scriptAlgs {
		if a == portero.SlidingLog {
			s.hit[a] = mk(allDriver, HitSource(a))
		} else {
			s.hit[a] = mk(oneDriver, HitSource(a))
			s.hit[a].hit = name + "_" + hitFn
		}
		s.one[a] = mk(allDriver, Source(a))
	}
	return s
}

func (s *scripts) pick(algs []portero.Algorithm) *script {
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
