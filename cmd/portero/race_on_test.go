//go:build race

package main

// raceEnabled is true under the race detector, which slows the long tests.
const raceEnabled = true
