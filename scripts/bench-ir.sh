#!/usr/bin/env bash
# bench-ir.sh — instructions per decision, counted by valgrind's callgrind,
# which gives the same figure on a loaded machine (timings do not), and
# cache misses per decision over a million keys, from callgrind's cache
# simulation (perf's hardware counters are not available on every VM: on
# the one docs/benchmarks.md was measured on, perf stat reports
# instructions and cache-misses as <not supported>).
#
# It builds the bench/ test binary and runs each benchmark twice under
# callgrind, for N1 and N2 iterations (-test.benchtime Nx), collecting only
# inside the timed loop (--collect-atstart=no; the loop turns collection on
# and off with a client request, callgrindToggle), with the garbage
# collector off, so that the difference divided by N2-N1 is the cost of one
# iteration:
#
#   - BenchmarkAlgorithms, every algorithm of the memory store on a hot key,
#     with the instant passed in and with the store's clock;
#   - BenchmarkHotKey, Portero and its peers (and noop-now, the loop and the
#     call alone, to subtract);
#   - with MISSES=1 (the default), BenchmarkRandomKeys for the subjects in
#     MISS_SUBJECTS, under --cache-sim=yes: D1 and LL misses per decision,
#     with valgrind's cache model of this machine (printed).
#
#   N1, N2      iterations of the hot-key runs (default 20000, 120000)
#   RN1, RN2    iterations of the random-keys runs (default 200000, 1200000)
#   OUT         where the tables go (default bench/results/ir.md)
#
# Needs valgrind (apt-get install -y valgrind). The hot-key part takes about
# two minutes, the misses about five per subject.
set -euo pipefail
cd "$(dirname "$0")/.."
N1=${N1:-20000}
N2=${N2:-120000}
RN1=${RN1:-200000}
RN2=${RN2:-1200000}
OUT=${OUT:-bench/results/ir.md}
MISSES=${MISSES:-1}
MISS_SUBJECTS=${MISS_SUBJECTS:-noop-now portero-now portero-coarse httprate-local sethvargo-memorystore}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd bench && go test -c -o "$tmp/bench.test" .)

# events BENCH N [callgrind options]: the summary line of one run (Ir, then
# the cache events with --cache-sim=yes).
events() {
	local bench=$1 n=$2
	shift 2
	(cd bench && GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind "$@" --collect-atstart=no \
		--callgrind-out-file="$tmp/cg.out" "$tmp/bench.test" -test.run '^$' -test.bench "$bench" \
		-test.benchtime "${n}x" -test.cpu 1 >/dev/null 2>"$tmp/vg.log")
	# The summary leaves out trailing zeros: nine events with the cache
	# simulation.
	local pad=1
	[[ " $* " == *" --cache-sim=yes "* ]] && pad=9
	sed -n 's/^summary: *//p' "$tmp/cg.out" | awk -v n="$pad" '{ for (i = NF + 1; i <= n; i++) $i = 0; print }'
}
# per BENCH N1 N2 [options]: events per iteration, one decimal.
per() {
	local bench=$1 a=$2 b=$3
	shift 3
	local x y
	x=$(events "$bench" "$a" "$@")
	y=$(events "$bench" "$b" "$@")
	paste <(tr ' ' '\n' <<<"$x") <(tr ' ' '\n' <<<"$y") | awk -v n=$((b - a)) '{ v = ($2 - $1) / n; if (v > -0.05 && v < 0.05) v = 0; printf "%.1f ", v }'
}

{
	echo "Instructions per decision (callgrind; $((N2 - N1)) iterations, setup excluded), $(go version | cut -d' ' -f3), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')."
	echo
	echo "| algorithm | instant passed in (AllowN) | store's clock (Allow) |"
	echo "|---|---:|---:|"
	for a in fixed-window fixed-window-anchored sliding-log sliding-counter token-bucket leaky-meter gcra leaky-queue; do
		now=$(per "^BenchmarkAlgorithms\$/^$a\$/^now\$" "$N1" "$N2")
		clock=$(per "^BenchmarkAlgorithms\$/^$a\$/^clock\$" "$N1" "$N2")
		echo "| $a | ${now% } | ${clock% } |"
	done
	echo
	echo "| one hot key (BenchmarkHotKey) | instructions per decision |"
	echo "|---|---:|"
	subjects=$(cd bench && "$tmp/bench.test" -test.run '^$' -test.bench '^BenchmarkHotKey$' -test.benchtime 1x -test.cpu 1 |
		sed -n 's/^BenchmarkHotKey\/\([^ ]*\) .*/\1/p')
	for s in $subjects; do
		echo "| $s | $(per "^BenchmarkHotKey\$/^$s\$" "$N1" "$N2" | sed 's/ $//') |"
	done
	if [ "$MISSES" = 1 ]; then
		# The LL cache as lscpu reports it (a VM's CPUID may claim all of
		# the host's L3: valgrind would then simulate 512 MB), 16-way.
		llopt=()
		if l3=$(lscpu -B 2>/dev/null | sed -n 's/^L3 cache: *\([0-9]*\).*/\1/p') && [ -n "$l3" ]; then
			llopt=(--LL="$l3",16,64)
		fi
		echo
		echo "Cache misses per decision over a million keys (BenchmarkRandomKeys, callgrind --cache-sim=yes; $((RN2 - RN1)) decisions, setup excluded):"
		echo
		echo "| subject | instructions | data reads | D1 read misses | LL read misses | D1 write misses | LL write misses |"
		echo "|---|---:|---:|---:|---:|---:|---:|"
		for s in $MISS_SUBJECTS; do
			# Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
			read -r ir dr _ _ d1mr d1mw _ dlmr dlmw <<<"$(per "^BenchmarkRandomKeys\$/^$s\$" "$RN1" "$RN2" --cache-sim=yes "${llopt[@]}")"
			echo "| $s | $ir | $dr | $d1mr | $dlmr | $d1mw | $dlmw |"
		done
		echo
		echo "Valgrind's model of this machine's caches:"
		echo
		sed -n 's/^desc: \(.*cache:.*\)/- \1/p' "$tmp/cg.out"
	fi
} | tee "$OUT"
