// Package sameanswer holds the acceptance test of the one engine: one rule
// fed through every door (the net/http middleware, the gateway, the gRPC
// interceptors, /v1/check, /v1/auth and the Envoy rate limit service on
// both of its transports, grpc-go and the lean one, also in its
// compatibility mode with envoyproxy/ratelimit, over real loopback HTTP
// and real grpc-go clients) gets the same answer at each, alone and
// stacked with a calendar quota, a concurrency limit or a shaped queue,
// healthy and under every failure policy. It has no code of its own; it
// sits above the doors so that it may import them all.
package sameanswer
