# Portero's container image: a static binary on distroless, run as non-root.
#
#   docker build -t portero .
#   docker run --rm -p 8080:8080 -p 9090:9090 -e PORTERO_ADMIN_TOKEN=change-me portero
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

# --- run stage -----------------------------------------------------------
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
