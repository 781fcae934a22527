#!/bin/sh
# Records internal/server/testdata/envoyproxy-statsd.golden: what
# envoyproxy/ratelimit sends to statsd for the calls of
# TestStatsdMatchesEnvoyproxy (internal/server/rls_statsd_test.go), which
# then compares Portero's statistics with it.
#
# Build envoyproxy/ratelimit's service_cmd first, outside this repository
# (as for scripts/envoyproxy-oracle.py):
#
#     git clone https://github.com/envoyproxy/ratelimit /tmp/erl
#     (cd /tmp/erl && GOFLAGS=-mod=mod go build -o /tmp/erl/bin/ ./src/service_cmd)
#
# then, from the repository's root:
#
#     scripts/envoyproxy-stats-golden.sh /tmp/erl/bin/service_cmd
#
# It runs service_cmd on a redis-server of its own on loopback, with
# STATSD_PROTOCOL=udp to a listener of the test. Run it again when the
# scripted calls or their configuration change.
set -eu
cmd=${1:?usage: $0 PATH/TO/service_cmd}
case $cmd in /*) ;; *) cmd=$(pwd)/$cmd ;; esac
exec go test -count=1 -run '^Test(Dog)?StatsdMatchesEnvoyproxy$' ./internal/server -envoyproxy-service-cmd="$cmd" -v
