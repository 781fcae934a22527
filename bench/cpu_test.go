package bench

// TestHotKeyCPU measures BenchmarkHotKey's subjects in CPU time rather than
// wall time: on a shared machine the wall time of a benchmark counts the
// slices other processes took, the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID) does not. The subjects run in short bursts,
// one after the other, sixty times over, so that a change in the machine's
// load meets them all; it prints each one's median and the two hot-key
// ratios. It runs only with PORTERO_BENCH_HOTCPU=1:
//
//	cd bench && PORTERO_BENCH_HOTCPU=1 go test -run TestHotKeyCPU -v -count=1 .

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// threadCPU is the calling thread's CPU time in ns.
func threadCPU() int64 {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func TestHotKeyCPU(t *testing.T) {
	if os.Getenv("PORTERO_BENCH_HOTCPU") != "1" {
		t.Skip("set PORTERO_BENCH_HOTCPU=1 to measure the hot key in CPU time (about ten seconds)")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	want := []string{"portero-now", "portero-clock", "xrate-syncmap-now", "xrate-sharded-now", "xrate-syncmap-clock", "xrate-sharded-clock", "sethvargo-memorystore"}
	var subs []subject
	for _, s := range subjects() {
		if slices.Contains(want, s.name) {
			subs = append(subs, s)
		}
	}
	allows := make([]allowFunc, len(subs))
	for i, s := range subs {
		var done func()
		allows[i], done = s.make(t)
		defer done()
		allows[i]("hot", base)
	}
	const rounds, burst = 60, 200_000
	perOp := make([][]float64, len(subs))
	for r := range rounds {
		for i, s := range subs {
			allow, start := allows[i], threadCPU()
			if s.takesNow() {
				for j := range burst {
					allow("hot", base.Add(time.Duration(r*burst+j)*250))
				}
			} else {
				for range burst {
					allow("hot", time.Time{})
				}
			}
			perOp[i] = append(perOp[i], float64(threadCPU()-start)/burst)
		}
	}
	median := map[string]float64{}
	fmt.Println("| subject | CPU ns per decision (median of 60 bursts) |\n|---|---:|")
	for i, s := range subs {
		slices.Sort(perOp[i])
		median[s.name] = perOp[i][rounds/2]
		fmt.Printf("| %s | %.1f |\n", s.name, median[s.name])
	}
	clockPeer := min(median["xrate-syncmap-clock"], median["xrate-sharded-clock"], median["sethvargo-memorystore"])
	nowPeer := min(median["xrate-syncmap-now"], median["xrate-sharded-now"])
	fmt.Printf("\nclock read: %.2f× the fastest peer; instant passed in: %.2f×\n",
		clockPeer/median["portero-clock"], nowPeer/median["portero-now"])
}
