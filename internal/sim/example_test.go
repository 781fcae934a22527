package sim_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/sim"
	"github.com/portero-rl/portero/store/memstore"
)

// Replay a trace through a token bucket of 2 per second: the bucket starts
// full, so the burst of two at 0 s passes and the third waits half a second.
func ExampleReplay() {
	trace, err := sim.ParseTrace(strings.NewReader("time,key\n0,a\n0,a\n0,a\n0.5,a\n"))
	if err != nil {
		panic(err)
	}
	store, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		panic(err)
	}
	defer store.Close(context.Background())
	rule := portero.Rule{Name: "api", Algorithm: portero.TokenBucket, Limit: portero.PerSecond(2)}
	results, err := sim.Replay(context.Background(), store, rule, trace)
	if err != nil {
		panic(err)
	}
	sim.WriteResults(os.Stdout, "table", results, false)
	// Output:
	// time  key  cost  allowed  remaining  retry_after
	// 0     a    1     true     1          0
	// 0     a    1     true     0          0
	// 0     a    1     false    0          0.5
	// 0.5   a    1     true     0          0
}

// The most admissions in any one-second interval [s, s+1s).
func ExampleMaxInWindow() {
	ms := time.Millisecond
	admitted := []time.Duration{900 * ms, 950 * ms, 1000 * ms, 1050 * ms, 2000 * ms}
	fmt.Println(sim.MaxInWindow(admitted, time.Second))
	// Output: 4
}

func ExampleFormatSeconds() {
	fmt.Println(sim.FormatSeconds(1500*time.Millisecond), sim.FormatSeconds(time.Second+1), sim.FormatSeconds(0))
	// Output: 1.5 1.000000001 0
}
