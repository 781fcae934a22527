# Portero's container image: a static binary on distroless, run as non-root.
#
#   docker build -t portero .
#   docker run --rm -p 8080:8080 -v "$PWD/examples/deploy/portero.yaml:/etc/portero/portero.yaml:ro" portero
#
# The build stage's flags are the ones examples/deploy's test builds with, so
# what this file produces is checked on machines without a Docker engine.
# See docs/operations.md (packaging).

# --- build stage ---------------------------------------------------------
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static (no cgo, no libc), reproducible paths, the version stamped by the
# Go toolchain from the module and VCS metadata (portero --version).
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/portero ./cmd/portero
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
