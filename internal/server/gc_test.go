package server

import (
	"runtime"
	rtmetrics "runtime/metrics"
	"testing"
)

// gogc is the GOGC in force, as the runtime reports it.
func gogc() int {
	s := [1]rtmetrics.Sample{{Name: "/gc/gogc:percent"}}
	rtmetrics.Read(s[:])
	return int(s[0].Value.Uint64())
}

// collectUntil runs collections until ok holds (the floor retunes in a
// cleanup, which runs on its own goroutine after a collection), at most
// 200 of them.
func collectUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for range 200 {
		if ok() {
			return
		}
		runtime.GC()
		runtime.Gosched()
	}
	t.Fatalf("after 200 collections: %s: GOGC is %d", what, gogc())
}

// TestGCFloor: while Run serves, a small live heap gets a heap target of
// heapFloor instead of GOGC=100's 4 MiB; a live heap above half the floor
// is collected at GOGC=100; afterwards, and when the operator set GOGC, the
// setting is left as it was.
func TestGCFloor(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	runtime.GC()
	stop := startGCFloor()
	// The test binary's live heap is a few MiB: the target is the floor.
	if p := gogc(); p <= 400 {
		t.Errorf("GOGC with a small live heap = %d, want > 400 (a %d MiB floor)", p, heapFloor>>20)
	}
	// A live heap above half the floor: GOGC=100 again, after a collection.
	big := make([][]byte, 48)
	for i := range big {
		big[i] = make([]byte, 1<<20)
	}
	collectUntil(t, "48 MiB live", func() bool { return gogc() == 100 })
	runtime.KeepAlive(big)
	big = nil
	collectUntil(t, "the 48 MiB freed", func() bool { return gogc() > 400 })
	stop()
	if p := gogc(); p != 100 {
		t.Errorf("GOGC after the last Run = %d, want 100", p)
	}
	runtime.GC()

	// The operator's choice is left alone.
	t.Setenv("GOGC", "150")
	stop = startGCFloor()
	if p := gogc(); p != 100 {
		t.Errorf("with GOGC set, GOGC = %d, want it untouched (100 in this test)", p)
	}
	stop()
}
