#!/usr/bin/env bash
# redis-script-ir.sh [REV] — Redis-side cost of one decision per algorithm,
# counted in CPU instructions (valgrind's Ir) inside redis-server, which,
# unlike µs, does not depend on what else the machine is doing.
#
# It assembles each algorithm's one-hit script from store/redisstore/lua at
# git revision REV (the work tree when omitted; a revision without one.lua
# gets its driver.lua, as the store then ran), starts redis-server under
# callgrind on a free loopback port, and for each script runs 2,000 warm-up
# calls, then N (default 5,000) EVALSHA calls with redis-benchmark (4
# connections pipelined 16 deep, 1,000 keys, server clock, one hit of cost
# 1 under a limit that admits them all), and prints instructions per call.
# The "empty" row is a script that only returns six integers: the cost of
# EVALSHA itself, networking and parsing included.
#
# Needs valgrind, redis-server and redis-tools (apt-get install -y valgrind
# redis-server redis-tools). Takes about a minute.
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
measure() { # measure NAME SCRIPTFILE ALG P1 P2 P3
	local sha
	sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$2")")
	local cmd=(EVALSHA "$sha" 1 "p:{k__rand_int__}:x" server 0 0 1 0 "$3" 1 "$4" "$5" "$6")
	redis-cli -p "$port" FLUSHALL >/dev/null
	redis-benchmark -p "$port" -n 2000 -c 4 -P 16 -r 1000 -q "${cmd[@]}" >/dev/null
	callgrind_control -z "$pid" >/dev/null
	redis-benchmark -p "$port" -n "$N" -c 4 -P 16 -r 1000 -q "${cmd[@]}" >/dev/null
	callgrind_control -d "$pid" >/dev/null
	sleep 0.3
	local f ir
	f=$(ls -t "$tmp"/cg."$pid".* | head -1)
	ir=$(sed -n 's/^\(summary\|totals\): *//p' "$f" | head -1)
	rm -f "$tmp"/cg."$pid".*
	printf '| %s | %d |\n' "$1" $((ir / N))
}
echo "| script (${REV:-work tree}) | instructions per EVALSHA |"
echo "|---|---:|"
echo 'return {1,1,1,1,1,1}' >"$tmp/empty.lua"
measure empty "$tmp/empty.lua" gcra 1000 1000000000000 1000000
for a in fixed_window:fixed-window:w fixed_window_anchored:fixed-window-anchored:w sliding_counter:sliding-counter:w \
	sliding_log:sliding-log:w token_bucket:token-bucket:b leaky_meter:leaky-meter:b gcra:gcra:b leaky_queue:leaky-queue:b; do
	IFS=: read -r f name kind <<<"$a"
	driver=one.lua
	if [ "$f" = sliding_log ] || ! lua one.lua >/dev/null; then driver=driver.lua; fi
	{ lua prelude.lua; echo; lua "$f.lua"; echo; lua "$driver"; } >"$tmp/s.lua"
	if [ "$kind" = w ]; then
		measure "$name" "$tmp/s.lua" "$name" 1000000000 1000000 0 # 1,000,000 per second
	else
		measure "$name" "$tmp/s.lua" "$name" 1000 1000000000000 1000000
	fi
done
