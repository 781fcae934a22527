#!/usr/bin/env bash
# bench-gateway.sh measures `portero serve` (memory store) beside nginx
# (proxy_pass + limit_req), a bare httputil.ReverseProxy, a bare net/http
# handler sending the bytes of Portero's 429 and the upstream alone, all on
# 127.0.0.1, in the same interleaved rounds, so that every ratio it prints
# comes from one run. It prints Markdown (command, machine, medians, every
# round's figures, the ratios) and keeps a copy beside the raw outputs;
# docs/benchmarks-gateway.md's tables are pasted from it.
#
#   DURATION   seconds of load per run (default 10)
#   CONNS      connections (default 64)
#   THREADS    wrk threads (default 2)
#   ROUNDS     rounds; every subject runs once per round, interleaved, and
#              the median is reported (default 3)
#   LOADGEN    wrk (default when installed) or go (bench/gateway load)
#   PORTERO    a portero binary to measure (default: built from this tree)
#   BASELINE   another portero binary (an older build) to measure beside it:
#              adds the subjects base-pass and base-refuse, interleaved with
#              the others, so that before/after numbers share the same load
#   RUNTIME_ENV  environment for every Go subject, such as "GOGC=400"
#              (default none: Go's defaults, as portero serve runs unless
#              its operator sets GOGC or GOMEMLIMIT)
#   BASELINE_ENV environment for the base-* subjects only, after
#              RUNTIME_ENV: with BASELINE set to the PORTERO binary itself,
#              one build beside itself under other runtime settings
#   RESULTS    where the raw outputs are kept (default bench/results/gateway)
#   SUBJECTS   space-separated subset of: upstream bare-429 proxy
#              proxy-nopool portero-pass portero-refuse nginx-pass
#              nginx-refuse (default: all but proxy-nopool)
#
# Besides requests/s, every run reports the CPU time the subject's own
# processes spent per request (from /proc/PID/stat): on a machine shared with
# other work, requests/s moves with the neighbours' load, CPU per request
# much less.
#
# The subjects:
#   upstream        the upstream alone (a bare Go net/http handler answering "ok")
#   bare-429        a bare net/http handler answering every request with the
#                   status, headers and body portero-refuse sends (fetched
#                   from it at start): the yardstick of a refusal's CPU
#   proxy           bare httputil.ReverseProxy → upstream, configured like the gateway
#   proxy-nopool    the same without the copy-buffer pool (ReverseProxy's
#                   default: a new 32 KiB buffer per request)
#   portero-pass    portero serve → upstream, the default policy's shape with
#                   limits that admit the traffic (every request passes 3 rules)
#   portero-refuse  the same with a per-client limit of 1/h: every request is refused
#   nginx-pass      nginx proxy_pass with limit_req that admits the traffic
#   nginx-refuse    nginx limit_req refusing every request (429)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# The command as given, for the report.
cmd_env=""
for v in DURATION CONNS THREADS ROUNDS LOADGEN SUBJECTS RUNTIME_ENV BASELINE_ENV; do
	if [ -n "${!v:-}" ]; then cmd_env+="$v=\"${!v}\" "; fi
done
if [ -n "${BASELINE:-}" ]; then cmd_env+="BASELINE=<older portero> "; fi

DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
RESULTS=${RESULTS:-bench/results/gateway}
SUBJECTS=${SUBJECTS:-upstream bare-429 proxy portero-pass portero-refuse nginx-pass nginx-refuse}
if [ -z "${LOADGEN:-}" ]; then
	if command -v wrk >/dev/null; then LOADGEN=wrk; else LOADGEN=go; fi
fi
NGINX=$(command -v nginx || ls /usr/sbin/nginx 2>/dev/null || true)

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done # only what this script started
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$RESULTS"

echo "building..." >&2
(cd bench && go build -o "$tmp/harness" ./gateway)
if [ -z "${PORTERO:-}" ]; then
	go build -o "$tmp/portero" ./cmd/portero
	PORTERO=$tmp/portero
fi

# start NAME CMD...: runs CMD in the background, records its pid for the
# cleanup and sets addr to the address it prints ("listening on ADDR" or
# "gateway listening on http://ADDR"). Not called in $(...): the pid must
# reach this shell's list.
start() {
	local name=$1
	shift
	"$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	pids+=($!)
	pid=$!
	addr=
	for _ in $(seq 100); do
		addr=$(grep -m1 -oE 'listening on (http://)?127\.0\.0\.1:[0-9]+' "$tmp/$name.out" | grep -oE '127\.0\.0\.1:[0-9]+' || true)
		[ -n "$addr" ] && return
		sleep 0.1
	done
	echo "$name did not start:" >&2
	cat "$tmp/$name.err" >&2
	exit 1
}

declare -A url proc # proc: the pids whose CPU time a subject costs
# Go subjects run with GODEBUG=gctrace=1: each run also reports the
# collections it saw and their CPU per request (the trace's "ms cpu" sums).
trace="env GODEBUG=gctrace=1"
# Every Go subject runs under the same runtime settings (RUNTIME_ENV), so
# that only the code differs.
runtime_env=${RUNTIME_ENV:-}
start upstream $trace $runtime_env "$tmp/harness" upstream -listen 127.0.0.1:0
up=$addr
url[upstream]=http://$up/
proc[upstream]=$pid
start proxy $trace $runtime_env "$tmp/harness" proxy -listen 127.0.0.1:0 -upstream "http://$up"
url[proxy]=http://$addr/
proc[proxy]=$pid
start proxy-nopool $trace $runtime_env "$tmp/harness" proxy -buffer-pool=false -listen 127.0.0.1:0 -upstream "http://$up"
url[proxy-nopool]=http://$addr/
proc[proxy-nopool]=$pid

portero_config() { # $1: per-client limit
	cat <<EOF
server:
  listen: 127.0.0.1:0
store:
  type: memory
upstreams:
  app:
    url: http://$up
routes:
  - upstream: app
rules:
  - name: per-client
    key: ip
    algorithm: token-bucket
    limit: $1
  - name: login
    match:
      methods: [POST]
      path: /login
    key: ip
    algorithm: sliding-counter
    limit: 3/min
  - name: global
    key: global
    algorithm: sliding-counter
    limit: 100000000/s
EOF
}
portero_config "10000000/s burst 10000000" >"$tmp/pass.yaml"
portero_config "1/h" >"$tmp/refuse.yaml"
start portero-pass $trace $runtime_env "$PORTERO" serve --config "$tmp/pass.yaml" --admin-listen off --log-level warn
url[portero-pass]=http://$addr/
proc[portero-pass]=$pid
start portero-refuse $trace $runtime_env "$PORTERO" serve --config "$tmp/refuse.yaml" --admin-listen off --log-level warn
url[portero-refuse]=http://$addr/
proc[portero-refuse]=$pid
if [ -n "${BASELINE:-}" ]; then
	start base-pass $trace $runtime_env ${BASELINE_ENV:-} "$BASELINE" serve --config "$tmp/pass.yaml" --admin-listen off --log-level warn
	url[base-pass]=http://$addr/
	proc[base-pass]=$pid
	start base-refuse $trace $runtime_env ${BASELINE_ENV:-} "$BASELINE" serve --config "$tmp/refuse.yaml" --admin-listen off --log-level warn
	url[base-refuse]=http://$addr/
	proc[base-refuse]=$pid
	case " $SUBJECTS " in *" base-pass "*) ;; *) SUBJECTS="$SUBJECTS base-pass base-refuse" ;; esac
fi

if [ -n "$NGINX" ]; then
	np=$("$tmp/harness" freeport)
	nr=$("$tmp/harness" freeport)
	mkdir -p "$tmp/nginx/logs"
	cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes auto;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  limit_req_zone \$binary_remote_addr zone=pass:10m rate=10000000r/s;
  limit_req_zone \$binary_remote_addr zone=refuse:10m rate=1r/m;
  limit_req_status 429;
  upstream app { server $up; keepalive 64; }
  server {
    listen 127.0.0.1:$np;
    location / {
      limit_req zone=pass burst=10000000 nodelay;
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
  server {
    listen 127.0.0.1:$nr;
    location / {
      limit_req zone=refuse;
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
	"$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/logs/error.log" >"$tmp/nginx.out" 2>&1 &
	pids+=($!)
	nginx_master=$!
	for _ in $(seq 50); do
		curl -s -o /dev/null "http://127.0.0.1:$np/" && break
		sleep 0.1
	done
	url[nginx-pass]=http://127.0.0.1:$np/
	url[nginx-refuse]=http://127.0.0.1:$nr/
	# The workers serve both servers: a run's CPU is theirs and the master's.
	proc[nginx-pass]="$nginx_master $(ps -o pid= --ppid "$nginx_master" | tr '\n' ' ')"
	proc[nginx-refuse]=${proc[nginx-pass]}
fi

# cputicks PID...: user+system CPU time of the processes so far, in clock
# ticks (/proc/PID/stat fields 14 and 15).
cputicks() {
	local t=0 p
	for p in "$@"; do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$t"
}
hz=$(getconf CLK_TCK)

# peakrss PID...: the processes' peak resident memory so far, in MiB
# (VmHWM in /proc/PID/status), added up.
peakrss() {
	local kb=0 p
	for p in "$@"; do
		kb=$((kb + $(awk '/^VmHWM:/ {print $2}' "/proc/$p/status")))
	done
	echo $((kb / 1024))
}

# Use the refusing subjects' one allowed request, so that every measured
# request is refused.
for s in portero-refuse base-refuse nginx-refuse; do
	[ -n "${url[$s]:-}" ] && curl -s -o /dev/null "${url[$s]}" || true
done
start bare-429 $trace $runtime_env "$tmp/harness" refusal -listen 127.0.0.1:0 -from "${url[portero-refuse]}"
url[bare-429]=http://$addr/
proc[bare-429]=$pid

# gclines SUBJECT: the gctrace lines its stderr holds so far (0 for nginx).
gclines() {
	if [ -f "$tmp/$1.err" ]; then grep -c '^gc ' "$tmp/$1.err" || true; else echo 0; fi
}

# load SUBJECT OUT: one run; prints requests/s, p50 latency, non-2xx
# count, the CPU time the subject's own processes spent per request, in
# µs (for proxy and portero this excludes the upstream; it is the figure
# that other load on a shared machine disturbs least), and for Go subjects
# the collections during the run and their CPU per request, in µs ("-" for
# nginx).
load() {
	local u=${url[$1]} out=$2 rps p50 non2xx total ticks0 ticks1 gc0
	gc0=$(gclines "$1")
	# shellcheck disable=SC2086 # proc holds several pids for nginx
	ticks0=$(cputicks ${proc[$1]})
	if [ "$LOADGEN" = wrk ]; then
		wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$u" >"$out"
		rps=$(awk '/^Requests\/sec:/ {print $2}' "$out")
		p50=$(awk '$1 == "50%" {print $2}' "$out")
		non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out")
		total=$(awk '/requests in/ {print $1}' "$out")
	else
		"$tmp/harness" load -url "$u" -c "$CONNS" -d "${DURATION}s" >"$out"
		rps=$(grep -oE '[0-9]+ requests/s' "$out" | cut -d' ' -f1)
		p50=$(grep -oE 'p50 [^ ]+' "$out" | cut -d' ' -f2)
		total=$(grep -oE '^requests [0-9]+' "$out" | cut -d' ' -f2)
		local ok
		ok=$(grep -oE ' 200:[0-9]+' "$out" | cut -d: -f2)
		non2xx=$((total - ${ok:-0}))
	fi
	# shellcheck disable=SC2086
	ticks1=$(cputicks ${proc[$1]})
	local cpu gc="- -"
	cpu=$(awk -v t=$((ticks1 - ticks0)) -v hz="$hz" -v n="$total" 'BEGIN { printf "%.1f", (n > 0 ? t / hz * 1e6 / n : 0) }')
	if [ -f "$tmp/$1.err" ]; then
		gc=$(grep '^gc ' "$tmp/$1.err" | tail -n +$((gc0 + 1)) | awk -v n="$total" '{
			sub(/ ms cpu.*/, ""); c = $NF; gsub(/[+\/]/, " ", c); k = split(c, x, " ")
			for (i = 1; i <= k; i++) ms += x[i]
			cnt++
		} END { printf "%d %.2f", cnt, (n > 0 ? ms * 1000 / n : 0) }')
	fi
	echo "$rps $p50 ${non2xx:-0} $cpu $gc"
}

stamp=$(date -u +%Y%m%dT%H%M%SZ)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A runs # runs[SUBJECT,ROUND]="rps p50 non2xx cpu"
for round in $(seq "$ROUNDS"); do
	for s in $SUBJECTS; do
		[ -n "${url[$s]:-}" ] || continue
		r=$(load "$s" "$RESULTS/$stamp-$s-$round.txt")
		echo "round $round $s: $r" >&2
		runs[$s,$round]=$r
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# col SUBJECT N: the Nth figure of every round of SUBJECT, one a line.
col() {
	local r
	for r in $(seq "$ROUNDS"); do
		if [ -n "${runs[$1,$r]:-}" ]; then echo "${runs[$1,$r]}" | awk -v n="$2" '{print $n}'; fi
	done
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
joined() { awk -v f="$1" '{printf "%s" f, (NR>1?" / ":""), $1}'; }
# ratio A B N: per round, figure N of A over figure N of B; prints the
# median of the rounds' ratios, then every round's.
ratio() {
	local r a b list=""
	for r in $(seq "$ROUNDS"); do
		[ -n "${runs[$1,$r]:-}" ] && [ -n "${runs[$2,$r]:-}" ] || continue
		a=$(echo "${runs[$1,$r]}" | awk -v n="$3" '{print $n}')
		b=$(echo "${runs[$2,$r]}" | awk -v n="$3" '{print $n}')
		list+=$(awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')$'\n'
	done
	[ -n "$list" ] || return 0
	printf '%s %s' "$(printf '%s' "$list" | median)" "$(printf '%s' "$list" | joined %s)"
}

report() {
	local cmd=$cmd_env
	echo "### Run $stamp"
	echo
	echo "Command: \`${cmd}scripts/bench-gateway.sh\` ($LOADGEN, $CONNS connections, $THREADS threads, ${DURATION}s per run, $ROUNDS interleaved rounds)."
	echo
	local nv="" wv=""
	if [ -n "$NGINX" ]; then nv=", $("$NGINX" -v 2>&1 | sed 's/.*version: //' || true)"; fi
	if command -v wrk >/dev/null; then wv=", $( (wrk -v 2>&1 || true) | awk 'NR==1 {print $1, $2}')"; fi
	echo "Machine: $(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $(uname -sr), $(go version | awk '{print $3}')$nv$wv; load average $load_before before, $load_after after."
	echo
	echo "| subject | requests/s (median) | every round | p50 latency (median) | non-2xx | CPU µs/request (median) | every round | collections per run (median) | GC CPU µs/request (median) | peak RSS MiB |"
	echo "|---|---:|---|---:|---:|---:|---|---:|---:|---:|"
	local s
	for s in $SUBJECTS; do
		[ -n "${runs[$s,1]:-}" ] || continue
		# shellcheck disable=SC2086 # proc holds several pids for nginx
		printf '| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$s" \
			"$(col "$s" 1 | median)" "$(col "$s" 1 | joined %.0f)" "$(col "$s" 2 | sort | median)" \
			"$(col "$s" 3 | awk '{t+=$1} END {print t}')" "$(col "$s" 4 | median)" "$(col "$s" 4 | joined %s)" \
			"$(col "$s" 5 | median)" "$(col "$s" 6 | median)" "$(peakrss ${proc[$s]})"
	done
	echo
	echo "| ratio (per round, then the median) | target | median | every round |"
	echo "|---|---|---:|---|"
	local line a b n what target
	while IFS='|' read -r a b n what target; do
		line=$(ratio "$a" "$b" "$n")
		[ -n "$line" ] || continue
		echo "| $what | $target | ${line%% *} | ${line#* } |"
	done <<'EOF'
portero-pass|nginx-pass|1|portero-pass / nginx-pass, requests/s|≥ 0.5
portero-pass|nginx-pass|4|portero-pass / nginx-pass, CPU per request|
portero-pass|proxy|1|portero-pass / proxy, requests/s|
portero-pass|proxy|4|portero-pass / proxy, CPU per request|
proxy|nginx-pass|4|proxy / nginx-pass, CPU per request|
proxy-nopool|proxy|4|proxy-nopool / proxy, CPU per request|
proxy-nopool|proxy|1|proxy-nopool / proxy, requests/s|
portero-refuse|bare-429|4|portero-refuse / bare-429, CPU per request|≤ 1.3
portero-refuse|bare-429|1|portero-refuse / bare-429, requests/s|
portero-refuse|nginx-refuse|1|portero-refuse / nginx-refuse, requests/s|
portero-refuse|nginx-refuse|4|portero-refuse / nginx-refuse, CPU per request|
bare-429|upstream|4|bare-429 / upstream ("ok"), CPU per request|
portero-pass|base-pass|4|portero-pass / base-pass (BASELINE), CPU per request|
portero-pass|base-pass|1|portero-pass / base-pass (BASELINE), requests/s|
portero-refuse|base-refuse|4|portero-refuse / base-refuse (BASELINE), CPU per request|
portero-refuse|base-refuse|1|portero-refuse / base-refuse (BASELINE), requests/s|
EOF
	echo
	echo "Raw outputs: \`$RESULTS/$stamp-*\`."
}
report | tee "$RESULTS/$stamp.md"
