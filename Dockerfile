# Portero's container image: a static binary on distroless, run as non-root.
#
#   docker build -t portero .
#   docker run --rm -p 8080:8080 -p 9090:9090 -e PORTERO_ADMIN_TOKEN=change-me portero
#
# The target ratelimit is a drop-in for envoyproxy/ratelimit's image: its
# entrypoint is /bin/ratelimit, so that it runs the rate limit service
# configured by envoyproxy/ratelimit's environment with no command, with
# a compose file's "command: /bin/ratelimit" and with Kubernetes'
# command: ["/bin/ratelimit"] (docs/envoy.md):
#
#   docker build --target ratelimit -t portero-ratelimit .
#
# The configuration (examples/deploy/portero.yaml, copied in below) reads the
# admin listener's token from PORTERO_ADMIN_TOKEN: without it the container
# exits with status 2. The build stage runs `make build`, which
# examples/deploy's test runs too, so what this file produces is checked on
# machines without a Docker engine. See docs/operations.md (packaging).

# --- build stage ---------------------------------------------------------
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
# The whole checkout, .git included (see .dockerignore): the Go toolchain
# stamps the revision from it, which portero --version prints.
COPY . .
# Static (no cgo, no libc), reproducible paths (Makefile, build).
RUN make build BIN=/out/portero
# envoyproxy/ratelimit's image runs /bin/ratelimit: under that name Portero
# is its rate limit service, configured by its environment (docs/envoy.md,
# "change only the image"). A directory copy keeps the symlink a symlink.
RUN mkdir -p /out/bin && ln -s /usr/local/bin/portero /out/bin/ratelimit

# --- envoyproxy/ratelimit's drop-in (docker build --target ratelimit) ------
# Its ports: HTTP 8080 (/json, /healthcheck), gRPC 8081, debug 6070 (on
# 127.0.0.1 unless DEBUG_HOST says otherwise). No CMD, as there.
FROM gcr.io/distroless/static-debian12:nonroot AS ratelimit
COPY --from=build /out/portero /usr/local/bin/portero
COPY --from=build /out/bin/ /bin/
USER 65532:65532
EXPOSE 8080 8081 6070
ENTRYPOINT ["/bin/ratelimit"]

# --- run stage (the default) --------------------------------------------
# distroless/static has no shell and no package manager; its "nonroot" user
# is 65532. Nothing in the image is writable by that user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/portero /usr/local/bin/portero
COPY --from=build /out/bin/ /bin/
COPY examples/deploy/portero.yaml /etc/portero/portero.yaml
USER 65532:65532
# 8080: the gateway; 9090: the admin listener (token required, see portero.yaml).
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/portero"]
CMD ["serve", "--config", "/etc/portero/portero.yaml", "--watch"]
