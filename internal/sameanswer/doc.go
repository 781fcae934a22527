// Package sameanswer holds the acceptance test of the one engine: one rule
// fed through every door (the net/http middleware, the HTTP check API and
// the Envoy rate limit service, over real loopback HTTP and a real gRPC
// client) gets the same answer at each. It has no code of its own; it sits
// above the doors so that it may import them all.
package sameanswer
