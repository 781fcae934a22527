package retrysim_test

import (
	"fmt"

	"github.com/portero-rl/portero/internal/sim/retrysim"
)

func ExampleRunHerd() {
	r, err := retrysim.RunHerd(retrysim.HerdConfig{Seed: 1})
	if err != nil {
		panic(err)
	}
	for _, v := range r.Variants {
		fmt.Printf("%s: peak %v per 100 ms, waves at %v\n", v.Name, v.Peak, v.Waves)
	}
	// Output:
	// no-jitter: peak 200 per 100 ms, waves at [1s 3s 7s]
	// full-jitter: peak 38 per 100 ms, waves at []
	// retry-after: peak 200 per 100 ms, waves at [1s 2s 3s]
	// retry-after+jitter: peak 31 per 100 ms, waves at []
}

func ExampleRunRetryStorm() {
	r, err := retrysim.RunRetryStorm(retrysim.StormConfig{Seed: 1})
	if err != nil {
		panic(err)
	}
	for _, s := range r.Summary {
		fmt.Printf("%s: %.0f/s offered, %.0f/s accepted during the incident\n", s.Strategy, s.Offered, s.Accepted)
	}
	// Output:
	// immediate: 370/s offered, 10/s accepted during the incident
	// per-request: 352/s offered, 10/s accepted during the incident
	// portero: 10/s offered, 10/s accepted during the incident
}
