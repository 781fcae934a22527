// Package retrysim holds the client-side experiments of "portero sim": what
// retries do to a service that is already refusing. Both are pure functions
// of their configuration (a random source of fixed seed, a virtual clock, no
// goroutines, no I/O) that return the numbers and the per-bucket series a
// chart needs.
//
//   - [RunRetryStorm]: a service receiving 100 new requests per second
//     suddenly accepts far fewer. Clients that retry at once (3 retries)
//     multiply the load it sees by up to 4; clients that back off politely
//     per request still multiply it, only later; a client that also shares
//     Retry-After and the announced quota across all its requests (the
//     portero client package) keeps the load near what the service accepts.
//   - [RunHerd]: 200 clients refused at the same instant. Without jitter
//     they come back together, in waves at 1 s, 3 s and 7 s; with full jitter
//     their retries spread out. Told "Retry-After: 1" each time, clients that
//     wait exactly that come back together at 1, 2 and 3 s; with the jitter
//     package client adds after it (up to 1 s) they spread too.
//
// Retries are numbered from 1 as in package client: retry n waits (a draw
// from [0, …) of) min(Cap, Base·2^(n−1)).
package retrysim
