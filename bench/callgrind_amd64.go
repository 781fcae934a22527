package bench

func valgrindRequest(args *[6]uint64) uint64

// callgrindToggle switches callgrind's collection of events on or off for
// the calling thread (CALLGRIND_TOGGLE_COLLECT); outside valgrind it does
// nothing. scripts/bench-ir.sh runs the benchmarks with
// --collect-atstart=no, so that only their timed loops are counted.
func callgrindToggle() {
	const toggleCollect = 'C'<<24 | 'T'<<16 + 2 // VG_USERREQ_TOOL_BASE('C','T') + 2
	valgrindRequest(&[6]uint64{toggleCollect})
}
