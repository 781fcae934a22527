#!/usr/bin/env bash
# redis-script-ir.sh [REV] — Redis-side cost of one decision per algorithm,
# counted in CPU instructions (valgrind's Ir) inside redis-server, which,
# unlike µs, does not depend on what else the machine is doing.
#
# It assembles the Lua of store/redisstore/lua at git revision REV (the work
# tree when omitted) as the store does (scripts.go): each algorithm's one-hit
# script, run with EVALSHA, and, where the drivers are functions (one.lua
# defines "one"), the library of every algorithm, run with FCALL (what the
# store calls on Redis 7 and later). It starts redis-server under callgrind
# on a free loopback port, and for each form runs 2,000 warm-up calls, then N
# (default 5,000) calls with redis-benchmark (4 connections pipelined 16
# deep, 1,000 keys, server clock, one hit of cost 1 under a limit that
# admits them all), and prints instructions per call: with EVALSHA and the
# whole ARGV, with FCALL of the same driver, and with FCALL of NAME_hit, the
# common call (server clock, counted, no TTL floor) with only the arguments
# that vary, which is what the store sends. The sliding log's one-hit call
# is its multi-hit driver.
#
# The "empty" rows are a script and a function that only return six
# integers: the cost of EVALSHA or FCALL itself, networking and parsing
# included. The "redis_rate" row is go-redis/redis_rate v10's GCRA script
# (read from the Go module cache, as bench/ requires it) at a million per
# second, burst a million, as bench/redis_test.go runs it.
#
# Needs valgrind, redis-server and redis-tools (apt-get install -y valgrind
# redis-server redis-tools). Takes two to three minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-}
N=${N:-5000}
tmp=$(mktemp -d)
lua() { # lua FILE: a file of store/redisstore/lua at REV
	if [ -z "$REV" ]; then cat "store/redisstore/lua/$1" 2>/dev/null; else git show "$REV:store/redisstore/lua/$1" 2>/dev/null; fi
}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.%p" redis-server --port "$port" --bind 127.0.0.1 \
	--save "" --appendonly no --dir "$tmp" >"$tmp/vg.log" 2>&1 &
vg=$!
trap 'kill $vg 2>/dev/null; wait $vg 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.2; done
pid=$(redis-cli -p "$port" INFO server | tr -d '\r' | sed -n 's/^process_id://p')
# count CMD...: instructions per call of CMD (with __rand_int__ in its key).
count() {
	redis-cli -p "$port" FLUSHALL >/dev/null
	redis-benchmark -p "$port" -n 2000 -c 4 -P 16 -r 1000 -q "$@" >/dev/null
	callgrind_control -z "$pid" >/dev/null
	redis-benchmark -p "$port" -n "$N" -c 4 -P 16 -r 1000 -q "$@" >/dev/null
	callgrind_control -d "$pid" >/dev/null
	sleep 0.3
	local f ir
	f=$(ls -t "$tmp"/cg."$pid".* | head -1)
	ir=$(sed -n 's/^\(summary\|totals\): *//p' "$f" | head -1)
	rm -f "$tmp"/cg."$pid".*
	echo $((ir / N))
}
key='p:{k__rand_int__}:x'
sha() { redis-cli -p "$port" SCRIPT LOAD "$(cat "$1")"; }
# The algorithms in portero.Algorithms order, with their file and parameter
# kind (w: windows, W and L; b: buckets, T, B·T and B).
algs="fixed_window:fixed-window:w fixed_window_anchored:fixed-window-anchored:w sliding_log:sliding-log:w
sliding_counter:sliding-counter:w token_bucket:token-bucket:b leaky_meter:leaky-meter:b gcra:gcra:b leaky_queue:leaky-queue:b"
params() { if [ "$1" = w ]; then echo 1000000000 1000000 0; else echo 1000 1000000000000 1000000; fi; } # a million per second
functions=0
if lua one.lua | grep -q '^local function one('; then
	functions=1
	{
		echo "#!lua name=portero_ir"
		lua prelude.lua
		for a in $algs; do echo; lua "${a%%:*}.lua"; done
		for d in one driver batch; do echo; lua "$d.lua"; done
		fns="one all batch"
		lua one.lua | grep -q '^local function hit(' && fns="$fns hit"
		for f in $fns; do echo "redis.register_function('portero_ir_$f', $f)"; done
	} >"$tmp/lib.lua"
	redis-cli -p "$port" FUNCTION LOAD REPLACE "$(cat "$tmp/lib.lua")" >/dev/null
	redis-cli -p "$port" FUNCTION LOAD REPLACE "#!lua name=portero_ir_empty
redis.register_function('portero_ir_empty', function() return {1,1,1,1,1,1} end)" >/dev/null
fi
echo "| script (${REV:-work tree}) | EVALSHA | FCALL | FCALL, common form |"
echo "|---|---:|---:|---:|"
echo 'return {1,1,1,1,1,1}' >"$tmp/empty.lua"
ev=$(count EVALSHA "$(sha "$tmp/empty.lua")" 1 "$key")
fc=""
[ "$functions" = 1 ] && fc=$(count FCALL portero_ir_empty 1 "$key")
echo "| empty | $ev | $fc | |"
for a in $algs; do
	IFS=: read -r f name kind <<<"$a"
	driver=one fn=one
	if [ "$f" = sliding_log ] || ! lua one.lua >/dev/null; then driver=driver fn=all; fi
	{
		lua prelude.lua
		lua prelude.lua | grep -q '^local function param(' && echo 'param = tonumber' # as scripts.go's assemble
		echo; lua "$f.lua"; echo; lua "$driver.lua"
		[ "$functions" = 1 ] && echo "return $fn(KEYS, ARGV)"
	} >"$tmp/s.lua"
	read -r p1 p2 p3 <<<"$(params "$kind")"
	args=(server 0 0 1 0 "$name" 1 "$p1" "$p2" "$p3")
	ev=$(count EVALSHA "$(sha "$tmp/s.lua")" 1 "$key" "${args[@]}")
	fc="" hc=""
	[ "$functions" = 1 ] && fc=$(count FCALL "portero_ir_$fn" 1 "$key" "${args[@]}")
	if [ "$functions" = 1 ] && [ "$fn" = one ] && grep -q portero_ir_hit "$tmp/lib.lua"; then
		hargs=("$name" 1 "$p1" "$p2")
		[ "$name" = leaky-queue ] && hargs+=("$p3")
		hc=$(count FCALL portero_ir_hit 1 "$key" "${hargs[@]}")
	fi
	echo "| $name | $ev | $fc | $hc |"
done
if rr=$(cd bench && go list -m -f '{{.Dir}}' github.com/go-redis/redis_rate/v10 2>/dev/null) && [ -f "$rr/lua.go" ]; then
	awk '/^var allowN = redis.NewScript\(`/ { f = 1; next } f && /^`\)/ { exit } f' "$rr/lua.go" >"$tmp/rr.lua"
	echo "| redis_rate (go-redis/redis_rate v10 GCRA) | $(count EVALSHA "$(sha "$tmp/rr.lua")" 1 'rate:{k__rand_int__}' 1000000 1000000 1 1) | | |"
fi
