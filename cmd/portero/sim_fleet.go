package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero"

	"github.com/portero-rl/portero/internal/sim/fleetsim"
)

func newSimFleetCmd() *cobra.Command {
	var cfg fleetsim.Config
	var alg string
	var checked *fleetsim.Result
	cmd := experimentCmd("fleet [--instances 10,100,1000,10000] [--format table|csv|json] [--chart FILE.svg|FILE.png]",
		"A fleet on one global rule: exact, leased budgets and each instance alone",
		`Fleet runs N instances (10 to 10,000) on a virtual clock against one
shared memory store: a hot key every instance asks about (a global limit of
half what the fleet offers it per fixed window) and cold keys, steady and
bursty clients. Three modes: exact (every decision in the shared store),
leased (each instance spends batches taken from it in one call, the rule's
budget) and local (each instance alone: up to N x L). It prints, per mode and
fleet size, the worst window admitted on the hot key against its limit, the
early refusals (refused while the fleet's count was below the limit), the
shared store's calls per second and per decision, and a chart. It checks
the bounds of docs/distributed.md itself — exact and leased never over a
key's limit in a window, exact never early, leased early by at most what
its batches stranded; for a bucket, --algorithm token-bucket, leaky-meter or
gcra, at most B + r(tau + T) in any interval tau, and early refusals are
those beyond the exact mode's — and exits with status 1 when one is broken.`,
		"table", "chart",
		func(cmd *cobra.Command) (experiment, error) {
			a, err := portero.ParseAlgorithm(alg)
			if err != nil {
				return nil, usageErr(fmt.Errorf("--algorithm: %w", err))
			}
			cfg.Algorithm = a
			if err := cfg.Validate(); err != nil {
				return nil, usageErr(err)
			}
			res, err := fleetsim.Run(cmd.Context(), cfg)
			checked = res
			return res, err
		})
	f := cmd.Flags()
	f.IntSliceVar(&cfg.Instances, "instances", []int{10, 100, 1000, 10000}, "fleet sizes, 1 to 10,000")
	f.Float64Var(&cfg.Rate, "rate", 100, "requests a second each instance is offered")
	f.IntVar(&cfg.Burst, "burst", 20, "requests in a bursty client's burst")
	f.DurationVar(&cfg.Window, "window", 0, "the rules' fixed window (default 100ms)")
	f.IntVar(&cfg.Windows, "windows", 5, "windows simulated")
	f.DurationVar(&cfg.Budget, "budget", 0, "the leased rules' budget (default 50ms)")
	f.IntVar(&cfg.ColdKeys, "cold-keys", 100, "cold keys")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the traffic")
	f.StringVar(&alg, "algorithm", "fixed-window", "the hot key's algorithm: fixed-window, token-bucket, leaky-meter or gcra (a bucket's rate is the limit per window, its burst the same)")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := run(cmd, args); err != nil {
			return err
		}
		return checked.Check()
	}
	return cmd
}
