#!/usr/bin/env bash
# bench.sh runs Portero's memory store beside its peers (the nested module
# bench/) and regenerates docs/benchmarks.md from the results.
#
#   COUNT      rounds of every benchmark (default 6, the least benchstat
#              needs for a confidence interval)
#   HOT_TIME   -benchtime of the hot-key benchmarks (default 500ms)
#   RANDOM_N   decisions per run of the random-keys benchmark (default 1000000)
#   WAIT_LOAD  if set, each round waits (at most ten minutes) until the
#              1-minute load average is below it: on a shared machine, the
#              rounds then fall in its quieter moments (the report says so)
#   BASE       a git revision (default: none) whose Portero subjects run in
#              the same rounds, from a worktree of their own, so that the
#              report can say what the revisions since bought
#   OUT        the report (default docs/benchmarks.md)
#   RESULTS    where the raw results are kept (default bench/results), so
#              that later runs can be compared with benchstat
#   REPORT_ONLY=1 writes the report from the kept results without running
#   IR         1 (the default when valgrind is installed) also counts
#              instructions and cache misses per decision
#              (scripts/bench-ir.sh, about fifteen minutes) into $RESULTS/ir.md
#   The hot key is also measured in CPU time (bench/cpu_test.go, ten
#              seconds) into $RESULTS/hotcpu.md
#   REDIS      1 (the default when redis-server is installed) also runs the
#              Redis store's report (bench/redis_test.go, about two minutes)
#              into $RESULTS/redis.md and, with valgrind, the Redis-side
#              instructions per decision (scripts/redis-script-ir.sh) into
#              $RESULTS/redis-ir.md; 0 skips them
#
# The rounds are interleaved (every benchmark once, then again), so that a
# machine whose load changes meanwhile slows every subject alike.
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT=${COUNT:-6}
HOT_TIME=${HOT_TIME:-500ms}
RANDOM_N=${RANDOM_N:-1000000}
BASE=${BASE:-}
OUT=${OUT:-docs/benchmarks.md}
RESULTS=${RESULTS:-bench/results}
BENCHSTAT=(go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da)
have() { command -v "$1" >/dev/null; }

tmp=$(mktemp -d)
cleanup() {
	[ -d "$tmp/base" ] && git worktree remove --force "$tmp/base" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$RESULTS"
files="hot random memory"

if [ -z "${REPORT_ONLY:-}" ]; then
	{
		echo "load_before=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
		echo "start=$(date -u +%Y-%m-%dT%H:%MZ)"
		echo "count=$COUNT hot_time=$HOT_TIME random_n=$RANDOM_N"
		echo "base=\"$BASE\" head=\"$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' ':!bench/results' || echo '+changes')\""
	} >"$tmp/meta"
	(cd bench && go test -c -o "$tmp/bench.test" .)
	if [ -n "$BASE" ]; then
		git worktree add --detach "$tmp/base" "$BASE" >/dev/null 2>&1
		(cd "$tmp/base/bench" && go test -c -o "$tmp/base.test" .)
	fi
	run() { (cd bench && "$1" -test.run '^$' -test.count 1 "${@:2}"); }
	for f in $files; do : >"$tmp/$f.txt" && : >"$tmp/base-$f.txt"; done
	for i in $(seq "$COUNT"); do
		if [ -n "${WAIT_LOAD:-}" ]; then
			for _ in $(seq 60); do
				awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v m="$WAIT_LOAD" 'BEGIN { exit !(l < m) }' && break
				sleep 10
			done
			echo "round $i: load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$tmp/rounds"
		fi
		echo "round $i of $COUNT" >&2
		run "$tmp/bench.test" -test.bench '^Benchmark(HotKey|HotKeyParallel|Algorithms|Clock)$' -test.benchtime "$HOT_TIME" >>"$tmp/hot.txt"
		run "$tmp/bench.test" -test.bench '^BenchmarkRandomKeys$' -test.benchtime "${RANDOM_N}x" >>"$tmp/random.txt"
		run "$tmp/bench.test" -test.bench '^BenchmarkMemoryPerKey$' -test.benchtime 1x >>"$tmp/memory.txt"
		if [ -n "$BASE" ]; then
			run "$tmp/base.test" -test.bench '^Benchmark(HotKey|HotKeyParallel)$/^portero-(now|clock)$' -test.benchtime "$HOT_TIME" >>"$tmp/base-hot.txt"
			run "$tmp/base.test" -test.bench '^BenchmarkRandomKeys$/^portero-(now|clock)$' -test.benchtime "${RANDOM_N}x" >>"$tmp/base-random.txt"
			run "$tmp/base.test" -test.bench '^BenchmarkMemoryPerKey$/^portero-now$' -test.benchtime 1x >>"$tmp/base-memory.txt"
		fi
	done
	echo "load_after=\"$(cut -d' ' -f1-3 /proc/loadavg)\"" >>"$tmp/meta"
	if [ -n "${WAIT_LOAD:-}" ]; then
		echo "wait_load=\"$WAIT_LOAD\" rounds_load=\"$(sed 's/.*load \([^ ]*\).*/\1/' "$tmp/rounds" | paste -sd' ')\"" >>"$tmp/meta"
	fi
	rm -f "$RESULTS"/base-*.txt
	for f in $files; do
		cp "$tmp/$f.txt" "$RESULTS/"
		[ -n "$BASE" ] && cp "$tmp/base-$f.txt" "$RESULTS/"
	done
	cp "$tmp/meta" "$RESULTS/"
	if [ "${IR:-$(have valgrind && echo 1 || echo 0)}" = 1 ]; then
		echo "instructions and cache misses (scripts/bench-ir.sh)" >&2
		OUT="$RESULTS/ir.md" bash scripts/bench-ir.sh >/dev/null
	fi
	echo "the hot key in CPU time (TestHotKeyCPU)" >&2
	{
		echo "Run: $(date -u +%Y-%m-%dT%H:%MZ), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
		echo
		(cd bench && PORTERO_BENCH_HOTCPU=1 go test -run '^TestHotKeyCPU$' -v -count=1 .) | grep -E '^\||×|^$'
	} >"$RESULTS/hotcpu.md"
	if [ "${REDIS:-$(have redis-server && echo 1 || echo 0)}" = 1 ]; then
		echo "the Redis store's report" >&2
		{
			echo "Run: $(date -u +%Y-%m-%dT%H:%MZ), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
			echo
			(cd bench && PORTERO_BENCH_REDIS=1 go test -run '^TestRedisReport$' -v -count=1 .) | grep -E '^\||^One caller' |
				awk '/^\| subject|^\| algorithm|^\| one-hit|^One caller/ && NR > 1 { print "" } { print }'
		} >"$RESULTS/redis.md"
		if have valgrind; then
			echo "Redis-side instructions (scripts/redis-script-ir.sh)" >&2
			bash scripts/redis-script-ir.sh 2>/dev/null >"$RESULTS/redis-ir.md"
		fi
	fi
fi
# shellcheck disable=SC1091
. "$RESULTS/meta"
base=${base:-} head=${head:-"(not recorded)"} wait_load=${wait_load:-} rounds_load=${rounds_load:-}
read -r COUNT HOT_TIME RANDOM_N <<<"$(echo "$count $hot_time $random_n" | sed 's/[a-z_]*=//g')"
for f in $files; do
	cp "$RESULTS/$f.txt" "$tmp/$f.txt"
	if [ -s "$RESULTS/base-$f.txt" ]; then cp "$RESULTS/base-$f.txt" "$tmp/base-$f.txt"; fi
done

# stat runs benchstat in $tmp, so that its tables are headed by the file names.
stat() { (cd "$tmp" && "${BENCHSTAT[@]}" "$@" 2>/dev/null); }
for f in $files; do
	stat -format csv "$f.txt" >"$tmp/$f.csv"
done

# values NAME UNIT: the median of one benchmark (name without the -N suffix).
values() {
	awk -F, -v want="$1" -v unit="$2" '
		$1 == "" && $3 == "CI" { u = $2; next }
		{ n = $1; sub(/-[0-9]+$/, "", n) }
		!found && n == want && u == unit { print $2; found = 1 }' "$tmp"/hot.csv "$tmp"/random.csv "$tmp"/memory.csv
}
ns() { values "$1" sec/op | awk '{ if ($1 != "") printf "%.1f", $1 * 1e9 }'; }

# The fastest of a benchmark's subjects, among the given ones.
fastest() {
	local bench=$1 best="" bestv=""
	shift
	for s in "$@"; do
		v=$(ns "$bench/$s")
		[ -z "$v" ] && continue
		if [ -z "$bestv" ] || awk -v a="$v" -v b="$bestv" 'BEGIN { exit !(a < b) }'; then
			best=$s bestv=$v
		fi
	done
	echo "$best $bestv"
}
peers_now=(xrate-syncmap-now xrate-sharded-now)
peers_clock=(xrate-syncmap-clock xrate-sharded-clock sethvargo-memorystore throttled-gcra-memstore ulule-memory httprate-local)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "?"; else printf "%.2f", a / b }'; }
verdict() { if awk "BEGIN { exit !($1) }" 2>/dev/null; then echo met; else echo "**not met**"; fi; }
# times FACTOR TARGET BENCH PORTERO-SUBJECT PEERS...: a "≥ FACTOR× the
# fastest peer" row; twice is times 2.
times() {
	local factor=$1 label=$2 bench=$3 subject=$4
	shift 4
	local p pv v
	read -r p pv <<<"$(fastest "$bench" "$@")"
	v=$(ns "$bench/$subject")
	echo "| $label | $v ns ($subject) | $pv ns ($p) | $(ratio "$pv" "$v")× | $(verdict "$pv / $v >= $factor") |"
}
twice() { times 2 "$@"; }
parallel() {
	local s=$1 one par
	one=$(ns "HotKey/$s") par=$(ns "HotKeyParallel/$s")
	echo "| Parallel hot key ($s): per operation no worse than one goroutine | $par ns | $one ns (one goroutine) | $(ratio "$one" "$par")× | $(verdict "$par <= $one") |"
}
allocs_hot=$(values HotKey/portero-now allocs/op)
allocs_rand=$(values RandomKeys/portero-now allocs/op)
bkey=$(values MemoryPerKey/portero-now B/key)
read -r fm fm_v <<<"$(for s in "${peers_now[@]}" sethvargo-memorystore throttled-gcra-memstore ulule-memory httprate-local; do
	v=$(values "MemoryPerKey/$s" B/key); [ -n "$v" ] && echo "$s $v"; done | sort -k2 -g | head -1)"
# misses SUBJECT: L1d and LL read misses per decision over a million keys.
misses() {
	local m=""
	# The rows of the misses table have seven columns.
	[ -f "$RESULTS/ir.md" ] && m=$(awk -F'|' -v s=" $1 " 'NF >= 9 && $2 == s { gsub(/ /, "", $5); gsub(/ /, "", $6); print $5, $6 }' "$RESULTS/ir.md")
	echo "${m:-? ?}"
}
read -r d1 ll <<<"$(misses portero-now)"
read -r noop_d1 noop_ll <<<"$(misses noop-now)"
# before_after: benchstat of BASE's Portero subjects against this run's.
before_after() {
	local f
	for f in $files; do
		[ -s "$tmp/base-$f.txt" ] || continue
		grep -E '^(goos|goarch|pkg|cpu|Benchmark[A-Za-z]*/portero-(now|clock)-)' "$tmp/$f.txt" >"$tmp/head-$f.txt"
		# Only the time and memory tables: the allocations are 0 on both sides.
		(cd "$tmp" && "${BENCHSTAT[@]}" "$base=base-$f.txt" "$head=head-$f.txt" 2>/dev/null) | grep -v '^\(goos\|goarch\|pkg\|cpu\):' |
			awk -v RS= -v ORS='\n\n' '/sec\/op|B\/key/ && !/B\/op/'
		echo
	done
}

{
	cat <<MD
# Benchmarks

Portero's memory store (\`store/memstore\`) beside other Go rate limiters, each
measured the same way. This file is written by \`make bench\`
(\`scripts/bench.sh\`); do not edit it by hand.

The other measurements: the gateway beside a bare reverse proxy and nginx in
[benchmarks-gateway.md](benchmarks-gateway.md), the Envoy rate limit service beside
gubernator in [benchmarks-rls.md](benchmarks-rls.md), and the Redis store beside
redis_rate and redis-benchmark at the end of this file and in [distributed.md](distributed.md).

## How

\`\`\`
COUNT=$COUNT HOT_TIME=$HOT_TIME RANDOM_N=$RANDOM_N${base:+ BASE=$base} bash scripts/bench.sh
\`\`\`

- Machine: $(nproc) CPUs (\`nproc\`), $(lscpu | sed -n 's/^Model name: *//p' | head -1) (\`lscpu\`; Go reports \`$(sed -n 's/^cpu: //p' "$RESULTS/hot.txt" | head -1 | sed 's/ *$//')\`), $(go version | cut -d' ' -f3-), $(uname -sr).
- Run: $start, $COUNT interleaved rounds, code at $head${base:+, beside $base (BASE)}; the raw results are in \`$RESULTS/\`. Load average (1, 5, 15 min) before: $load_before; after: $load_after.
$(if [ -n "$wait_load" ]; then echo "  Each round waited for a 1-minute load average below $wait_load (WAIT_LOAD); the rounds started at $rounds_load."; fi)
  The machine is shared: a load above its CPU count means other work ran
  meanwhile, which widens the intervals and slows every subject. Compare the
  ratios of subjects measured in the same rounds, and the instruction counts
  below, which do not depend on the load.
- \`perf stat\` is not available on this VM (it reports instructions and
  cache-misses as \`<not supported>\`): instructions and cache misses are
  counted with valgrind instead (\`scripts/bench-ir.sh\`, below).
- Limit: a million per second with a burst of 1,000 (Portero: GCRA), or a
  million per one-second window for the window-based peers.
- Subjects: \`portero-now\` is \`(*memstore.Limiter).AllowN\` with the instant passed in,
  \`portero-clock\` is \`Allow\`, which reads the store's clock (one read of the
  runtime's monotonic clock; \`time.Now\` makes two), \`portero-coarse\` is \`Allow\`
  with \`Config.ClockResolution\` of a millisecond (an atomic load of a reading
  that a goroutine refreshes every millisecond: behind the clock by at most
  that plus the scheduler's delay, never ahead, never back; see
  \`memstore.Config\`). \`noop-now\` decides nothing: the loop and the call alone. \`xrate-*\` are
  \`golang.org/x/time/rate\` limiters kept per key in a \`sync.Map\` or in 64
  mutex-guarded maps, called with \`AllowN(t, 1)\` (\`-now\`) or \`Allow()\` (\`-clock\`);
  \`sethvargo-memorystore\` is \`github.com/sethvargo/go-limiter/memorystore\` \`Take\`;
  \`throttled-gcra-memstore\` is \`github.com/throttled/throttled/v2\` GCRA over its
  memory store (LRU of 2²⁰ keys, like Portero's default cap); \`ulule-memory\` is
  \`github.com/ulule/limiter/v3\` with its memory store; \`httprate-local\` is
  \`github.com/go-chi/httprate\`'s \`OnLimit\` logic over its local counter, without
  the HTTP request and headers. Only Portero and x/time/rate take the instant
  as a parameter; the others always read the clock (sethvargo's with the
  runtime's \`time.now\`, the wall and the monotonic clock as \`time.Now\`
  reads them; the rest with \`time.Now\`).
- Benchmarks: \`HotKey\`, one key, one goroutine; \`HotKeyParallel\`, one key,
  \`b.RunParallel\` on both CPUs; \`Algorithms\`, every algorithm of the memory
  store on a hot key, with the instant passed in and with the store's clock;
  \`RandomKeys\`, a million keys already known to the limiter,
  picked at random, with the clock read for every decision (by the subject
  itself, or by the loop with \`time.Now\` for the \`-now\` forms);
  \`MemoryPerKey\`, live heap (HeapAlloc after a GC) added by a million keys,
  divided by a million. The key strings exist before and are not counted; a
  limiter that keeps a copy of the key pays for the copy, one that keeps the
  caller's string pays only its 16-byte header. \`Clock\` is \`time.Now\` alone.

## Results

### One hot key, every algorithm

\`\`\`
$(stat -table .name hot.txt)
\`\`\`

### A million keys at random

\`\`\`
$(stat random.txt)
\`\`\`

### Memory per key at a million keys

\`\`\`
$(stat memory.txt)
\`\`\`
MD
	if [ -f "$RESULTS/ir.md" ]; then
		cat <<MD

### Instructions and cache misses per decision

\`scripts/bench-ir.sh\` (run by \`make bench\` when valgrind is installed): each
benchmark under callgrind for two iteration counts, counting only inside the
timed loop (the loop turns collection on and off with a client request), with
the garbage collector off; the difference divided by the difference of the
counts. The figures repeat to within a few instructions whatever the load.

MD
		cat "$RESULTS/ir.md"
	fi
	if [ -s "$RESULTS/base-hot.txt" ]; then
		cat <<MD

### Before and after: $base → $head

The Portero subjects of \`$base\` (BASE), built from a worktree of that revision and run in the same rounds:

\`\`\`
$(before_after)
\`\`\`
MD
	fi
	cat <<MD

## Targets

Medians from the tables above.

| Target | Portero | Peer | Ratio | |
| --- | --- | --- | --- | --- |
$(twice "Hot key, instant passed in: ≥ 2× the fastest peer in the same form" HotKey portero-now "${peers_now[@]}")
$(times 1.5 "Hot key, clock read, the store's exact clock: ≥ 1.5×" HotKey portero-clock "${peers_clock[@]}")
$(twice "Hot key, clock read, the coarse clock (ClockResolution 1ms): ≥ 2×" HotKey portero-coarse "${peers_clock[@]}")
$(twice "A million random keys, time.Now in the loop: ≥ 2×" RandomKeys portero-now "${peers_now[@]}")
$(twice "A million random keys, the store's exact clock: ≥ 2×" RandomKeys portero-clock "${peers_clock[@]}")
$(twice "A million random keys, the coarse clock: ≥ 2×" RandomKeys portero-coarse "${peers_clock[@]}")
| A million random keys: about two cache misses per decision, Portero's own (simulated, below) | portero-now: $d1 L1d, $ll LL read misses | the loop alone (noop-now): $noop_d1 L1d, $noop_ll LL | | $(verdict "$d1 - $noop_d1 <= 2") |
$(parallel portero-now)
$(parallel portero-clock)
$(parallel portero-coarse)
| 0 allocations per decision on an existing key | HotKey $allocs_hot, RandomKeys $allocs_rand allocs/op | | | $(verdict "$allocs_hot == 0 && $allocs_rand == 0") |
| ≤ 30 B of heap per key at a million keys | $bkey B/key | $(printf %.1f "$fm_v") B/key ($fm) | $(ratio "$fm_v" "$bkey")× | $(verdict "$bkey <= 30") |

MD
	if [ -f "$RESULTS/hotcpu.md" ]; then
		cat <<MD

The hot key in CPU time (the thread's, which leaves out what other processes
took; \`cd bench && PORTERO_BENCH_HOTCPU=1 go test -run TestHotKeyCPU -v
-count=1 .\`: sixty interleaved bursts of 200,000 decisions per subject):

MD
		cat "$RESULTS/hotcpu.md"
	fi
	cat <<MD

### Reading these numbers

The targets are judged on this run as it is. On a shared machine, a load
average above the CPU count (see "How") means each benchmark got a fraction of
a CPU: every time above is inflated, by different amounts for different
subjects, and the intervals (± after each median) show it. Compare the
ratios, measured in interleaved rounds, and the instruction counts, more
than the absolute times; run \`make bench\` on a quiet machine before quoting
a number.

What the design can and cannot reach: a decision of GCRA or the leaky queue
on a known key is one hash of the key (about 40 instructions, a call that
makes no other), one atomic load of the slot's hash and state, the
algorithm (inlined for GCRA), and one compare-and-swap when the request is
admitted (a refusal writes nothing); \`noop-now\` above is what the
benchmark's loop and call cost by themselves. Where the rest goes is in "Why the memory
store costs what it costs" below. The other algorithms take
the shard's mutex (a compare-and-swap and an atomic add) around the same
steps. The store's exact clock is one read of the runtime's monotonic
clock (\`runtime.nanotime\`, added to a wall-clock base taken once, at
\`New\`); it costs tens of nanoseconds on this VM (portero-clock less portero-now above), as much as the
rest of the decision. The peers that read the clock read two: go-limiter
(\`sethvargo-memorystore\`) calls \`time.now\`, the wall and the monotonic
clock, as \`time.Now\` does (\`Clock\`) for x/time/rate. With C the read and
D a decision, the exact-clock form's lead is (2C + D_peer) / (C + D): it
can pass 1.5× only with a decision well under the peer's, and never 2×;
the coarse clock removes the read.

Over a million keys every subject waits for memory. The loop's own accesses
are the key's string header (a random element of a 16 MB slice) and its bytes
(16 MB of small strings): two lines that no limiter can avoid. Portero adds
the slot's line (4 slots of 16 bytes to a 64-byte line, the probe starting at
the line's first slot; a probe runs on to the next line rarely). The table
above counts, in valgrind's model of this machine's caches, $d1 L1d read
misses per decision for \`portero-now\` against $noop_d1 for the loop alone
(\`noop-now\`, which reads the key and its bytes and decides nothing): the
difference is Portero's, the slot's line; $ll of them miss the LL ($noop_ll
for the loop alone).
A clock read per decision costs more here than the read alone: Linux reads the
TSC with RDTSCP (LFENCE then RDTSC where RDTSCP is missing), which keeps the
next decision's loads from starting before this
one's have finished, so that misses that could overlap are paid one after
the other; with the coarse clock they overlap, which is why
\`portero-coarse\` is far ahead of the subjects that read a clock.

## Why the memory store costs what it costs

- **Per key.** For each rule, each shard (a power of two, at least 4×GOMAXPROCS;
  one cache line each) has one mutex and an open-addressing array (linear
  probing) of slots: the key's 64-bit hash and the algorithm's state,
  16 bytes for GCRA and the leaky queue (one word), 24 for the others. The
  key string is not kept. A dropped key leaves a tombstone; the array is
  rebuilt when keys and tombstones pass 13/16 of it, to 10/16 keys, so a key
  costs 20 to 26 bytes (30 to 38 with two words), with no allocation per key
  and nothing for the garbage collector to scan (the slots hold no
  pointers). The sliding log keeps a map of logs instead: 8 bytes per admitted
  request plus about 100 per key.
- **Per decision.** A decision on a known key hashes the key (the Go
  runtime's own string hash for machines without AES, wyhash's mixing, with
  four random seeds per rule, in the store itself: \`strHash\`) and, for GCRA
  and the leaky queue, updates the slot with one
  compare-and-swap, without a lock: a slot belongs to one key for its
  array's life, and whoever deletes or moves a key (under the lock) first
  swaps its word for a marker that sends decisions to the lock, so a swap
  that succeeds updated the right key (\`store/memstore/table.go\`). The other
  algorithms take the shard's lock. No allocation. \`Allow\` adds one
  monotonic clock read (the store's clock is the wall time at \`New\`
  advanced by the monotonic clock), or an atomic load with
  \`Config.ClockResolution\`.
- **Where a hot-key decision's instructions go.** \`BenchmarkHotKey/portero-now\`
  counts about 327 instructions per decision (callgrind, collected in the timed
  loop only, as \`scripts/bench-ir.sh\` does);
  \`noop-now\`, the loop with \`time.Time.Add\` and the call, is 106 of them, and
  Portero's closure adds a few (it passes a context and drops a Decision).
  Of the rest: about 38 hash the key (\`strHash\`, a call that makes none, so
  it has no stack frame), 11 are \`time.Time.UnixNano\`, 10 check the cost and
  that the store is open, about 40 find the slot (the shard from the hash's
  high bits, the shard's array, the probe: three loads that depend on each
  other), about 40 are GCRA itself (inlined), and the rest, counted on
  \`AllowN\`'s own lines, are its frame (about 300 bytes, for the locked path),
  the registers saved around the hash's call, and the price of the
  interface's shape: a \`portero.Decision\` has eight fields, more than the
  compiler keeps in registers, so \`AllowN\` zeroes its result in memory on
  entry, GCRA writes the fields into it (\`algorithm.GCRA.SetDecision\`), and
  \`AllowN\` loads them into the eight result registers. The admitting quarter of
  the decisions adds the compare-and-swap. What is left is the interface (a
  \`time.Time\` in, a Decision and an error out) and dependent loads; a 2× lead
  with the instant passed in is about where this design ends.
- **A parallel hot key.** With the instant passed in, \`HotKeyParallel/portero-now\`
  admits an eighth of its decisions (each goroutine's instant advances
  250 ns a decision, the rule admits one per µs), far more admissions per
  second of real time than the rule would allow on a real clock. An
  admission must write the key's word, so the slot's cache line moves to the
  admitting core and, at the other core's next read, back: two transfers per
  admission that no exact decision on one shared word avoids. A refusal
  already writes nothing (the line stays shared by both cores), and an
  admission always changes the word (the TAT moves by cost·T ≥ 1 ns), so
  skipping the swap when the word would not change never applies; the only
  cheaper design would split a key's budget into per-core shares, which is
  not exact (one core refuses while the other has room). \`BenchmarkParallelFloor\`
  (\`-cpu 2\`, five runs, medians) separates the parts: the one key 17.1 ns a
  decision, the same key refusing everything 10.4, a key per goroutine 10.9,
  one goroutine (\`HotKey\`) 21.9; the machine's atomic add on one word shared
  by both cores 8.1 against 2.6 on a word each. So the line's moves cost the
  one key about 6.7 ns a decision, some 50 ns of wall time per admission,
  and in a throwaway count a quarter to a third of the admissions lost the
  swap to the other core once and decided again. That run is the machine at
  its best: on this VM the two vCPUs are at times far apart, and
  \`HotKeyParallel/portero-now\` then measures 32 to 37 ns
  (0.7× one goroutine) while a key per goroutine still halved; the target "no worse than one
  goroutine" holds in the first placement (17.1 against 21.9, 1.28×) and
  not in the second.
- **Hash collisions.** Two keys whose hashes agree (63 bits tell them apart)
  share one state: each is limited as if the other's requests were its own,
  stricter, never looser. Among n keys the chance that any two collide is about
  n²/2⁶⁴, 5·10⁻⁸ at a million keys; the hash seeds are random per store and rule.
- **Bounded memory.** \`Config.MaxKeys\` (default 2²⁰) caps the keys of each
  rule. When a shard is at its share, a new key first drops any expired state
  among 16 entries looked at (8 where the key goes, 8 from a random place),
  otherwise the one with the most room left (the key that has used least of its
  limit, so that forgetting it gives away least), the earliest to expire among
  equals. A flood of 200,000 one-request addresses therefore evicts its own
  kind and leaves a client that has used up its limit limited; the tests check
  that the store never exceeds its cap and that such a client stays refused.
- **Sweeping.** A sweeper (every minute by default; \`Close\` stops it) drops
  state that has returned to full, a thousand slots per lock hold, so memory
  follows the keys that are active.
MD
	if [ -f "$RESULTS/redis.md" ]; then
		cat <<MD

## The Redis store

\`store/redisstore\` beside go-redis/redis_rate and a raw \`redis-benchmark\`
EVALSHA of the same script, against a local redis-server sharing the two cores
(\`cd bench && PORTERO_BENCH_REDIS=1 go test -run TestRedisReport -v .\`; kept in
\`$RESULTS/redis.md\`). Where Redis has functions (7.0 and later) the store
calls its drivers as one library with FCALL; the "by hash" rows are the same
drivers run with EVALSHA, as on an older server (a user whose ACL denies
FUNCTION and FCALL). The targets and the account of them are in
[distributed.md](distributed.md), "Against the targets, honestly".

MD
		cat "$RESULTS/redis.md"
		if [ -f "$RESULTS/redis-ir.md" ]; then
			cat <<MD

Instructions that redis-server executes per call (\`scripts/redis-script-ir.sh\`,
under callgrind; independent of the load): each algorithm's one-hit script
with EVALSHA, the same driver in the library with FCALL, and the call the
store sends in the common case (the server's clock, counted, no TTL floor:
only the four or five arguments that vary), beside go-redis/redis_rate's
script. The sliding log's one-hit call is its multi-hit driver.

MD
			cat "$RESULTS/redis-ir.md"
		fi
	fi
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "wrote $OUT" >&2
