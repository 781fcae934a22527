# Portero's developer and CI entry points. CI runs .ci/run, which runs
# `make test` with CI=true.

GO       ?= go
FUZZTIME ?= 15s
# Minimising a new input may take 60s by default, most of a short fuzz run:
# cap it so that the time goes to executions.
FUZZMINIMIZETIME ?= 1s

.PHONY: build test vet deps bench fuzz

## build: the portero binary at BIN (default bin/portero): static, with
## the module's version and the git revision it was built from, which
## `portero --version` prints. -buildvcs=true because a GOFLAGS of
## -buildvcs=false (some CI images set it) would drop the revision
## silently; outside a git checkout there is none to record. The Dockerfile
## builds with this target.
BIN ?= bin/portero
build:
	CGO_ENABLED=0 $(GO) build -buildvcs=true -trimpath -ldflags="-s -w" -o $(BIN) ./cmd/portero

# Tests that count allocations skip under the race detector (it makes
# sync.Pool drop items at random): make test runs them again without it.
NORACE_TESTS ?= TestAllowedAllocations|TestOverloadAllocatesOnlyItsTicket|TestKeyHeaderNotCanonicalizedPerRequest

# bench/ is a module of its own whose peers (gubernator pulls in Kubernetes'
# client) take minutes to build: CI vets and runs, by file, only its fleet
# benchmark, which needs nothing but Portero, for a thousand decisions.
BENCH_FLEET = leased_test.go

## test: vet everything, run every test with the race detector, then the
## allocation tests that only run without it.
test: deps vet
	$(GO) test -race -timeout 18m ./...
	cd bench && $(GO) test -race -count=1 -run '^$$' -bench '^BenchmarkLeasedGlobal$$' -benchtime 1000x $(BENCH_FLEET)
	@out=$$($(GO) test -count=1 -run '^($(NORACE_TESTS))$$' -v ./httplimit ./internal/gateway 2>&1) || { echo "$$out"; exit 1; }; \
	echo "$$out" | grep -E '^(--- |ok)'; \
	want=$$(echo '$(NORACE_TESTS)' | tr '|' '\n' | wc -l); got=$$(echo "$$out" | grep -c '^--- PASS'); \
	[ "$$got" -eq "$$want" ] || { echo "want $$want allocation tests to pass without -race, $$got did"; exit 1; }

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet $(BENCH_FLEET)

## deps: install what the tests start or call (Debian's redis-server, nginx, systemd-analyze,
## prometheus for promtool, which checks and unit-tests examples/alerts, and chromium for the
## dashboard's browser tests) when missing and we are root.
deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null 2>&1 || missing="$$missing redis-tools"; \
	command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$$missing nginx"; \
	command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing$$missing from Debian"; \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
		else \
			echo "missing:$$missing: run 'sudo apt-get install -y$$missing' (tests that need them will fail)" >&2; \
		fi; \
	fi

## bench: Portero beside its peers (see scripts/bench.sh).
bench:
	bash scripts/bench.sh

## fuzz: run every fuzz target of the main module for FUZZTIME each (default 15s),
## minimising new inputs for at most FUZZMINIMIZETIME (default 1s); packages of
## nested modules (bench/) are skipped.
fuzz:
	@set -e; \
	for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		$(GO) list $$dir >/dev/null 2>&1 || continue; \
		for name in $$($(GO) test -list '^Fuzz' $$dir | grep '^Fuzz'); do \
			echo "== $$dir $$name"; \
			$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$dir; \
		done; \
	done
