package server

import (
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
)

// heapFloor is the least heap the garbage collector is let grow to between
// collections while Run serves. Go's default (GOGC=100) collects when the
// heap doubles, but at 4 MiB at the least; a gateway's live heap is a few
// MiB, so it collected every ~500 proxied requests. With the floor, the
// gateway benchmark (docs/benchmarks-gateway.md, run 20261201T141747Z)
// saw 11 collections a run instead of 201, and CPU per proxied request
// ×0.90 passing and ×0.87 refusing; a large live heap (a memory store
// with millions of keys) is collected as GOGC=100 would.
const heapFloor = 64 << 20

// gcFloor keeps the next heap target at max(2 × live heap, heapFloor) by
// setting GOGC after every collection, while at least one Run serves. It
// leaves the collector alone when the operator set GOGC or GOMEMLIMIT.
var gcFloor floorState

type floorState struct {
	mu      sync.Mutex
	users   int  // Runs serving
	armed   bool // a cleanup is waiting for the next collection
	percent int  // GOGC as last set
}

// startGCFloor applies the floor until stop is called.
func startGCFloor() (stop func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	g := &gcFloor
	g.mu.Lock()
	defer g.mu.Unlock()
	g.users++
	if g.users == 1 {
		debug.SetGCPercent(100)
		g.percent = 100
		g.tune()
	}
	if !g.armed {
		g.armed = true
		armGCFloor()
	}
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.users--; g.users == 0 {
			debug.SetGCPercent(100)
			g.percent = 100
		}
	}
}

// gcSentinel is garbage from birth: its cleanup runs after the next
// collection. It holds a pointer so that it is never a tiny allocation
// (those share a block, which would delay the cleanup).
type gcSentinel struct{ _ *int }

func armGCFloor() {
	runtime.AddCleanup(new(gcSentinel), func(struct{}) { afterGC() }, struct{}{})
}

func afterGC() {
	g := &gcFloor
	g.mu.Lock()
	if g.users == 0 {
		g.armed = false
		g.mu.Unlock()
		return
	}
	g.tune()
	g.mu.Unlock()
	armGCFloor()
}

// tune sets GOGC for the live heap the last collection found (1 MiB at
// least, so that the percentage stays bounded); g.mu is held.
func (g *floorState) tune() {
	s := [1]rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s[:])
	var live uint64
	if s[0].Value.Kind() == rtmetrics.KindUint64 {
		live = s[0].Value.Uint64()
	}
	p := 100
	if live < heapFloor/2 {
		p = int(heapFloor*100/max(live, 1<<20)) - 100
	}
	// Small changes of the live heap are not worth a new setting.
	if p*10 < g.percent*9 || p*10 > g.percent*11 || (p == 100) != (g.percent == 100) {
		debug.SetGCPercent(p)
		g.percent = p
	}
}
