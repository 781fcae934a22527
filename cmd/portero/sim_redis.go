package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/sim"
	"github.com/portero-rl/portero/internal/sim/race"
	"github.com/portero-rl/portero/store/redisstore"
)

// newSimRedisCmds returns the distributed experiments: sim race and sim
// instances.
func newSimRedisCmds() []*cobra.Command {
	return []*cobra.Command{newSimRaceCmd(), newSimInstancesCmd()}
}

func newSimRaceCmd() *cobra.Command {
	var cfg race.Config
	var format string
	cmd := &cobra.Command{
		Use:   "race --redis HOST:PORT [--instances 2] [--requests 400] [--limit 50] [--window 1m] [--rounds 5] [--format csv|table|json]",
		Short: "The race: instances sharing one Redis counter, atomic script against GET → compare → INCR",
		Long: `Race fires --requests requests at once, spread over --instances limiter
instances (each with its own Redis client, as separate processes would have),
at one key with a limit of --limit per --window, for --rounds rounds on fresh
keys. Each round runs twice: with Portero's Redis store (one Lua script reads,
decides and writes atomically) and with a deliberately naive limiter that
reads the counter with GET, compares in the application and then INCRs.

It prints one row per round and mode: round,mode,admitted. The atomic store
admits exactly --limit every round; the naive one lets the instances that read
the same count all pass.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			if cfg.Addr == "" {
				return usageErr(fmt.Errorf("--redis HOST:PORT is required"))
			}
			if cfg.Instances < 1 || cfg.Requests < 1 || cfg.Rounds < 1 || cfg.Limit < 1 || cfg.Window <= 0 {
				return usageErr(fmt.Errorf("--instances, --requests, --rounds, --limit and --window must be positive"))
			}
			res, err := race.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			t := sim.Table{Header: []string{"round", "mode", "admitted"}}
			for _, r := range res {
				t.Rows = append(t.Rows, []string{strconv.Itoa(r.Round), r.Mode, strconv.FormatInt(r.Admitted, 10)})
			}
			return t.Write(cmd.OutOrStdout(), format)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "redis", "", "Redis server, HOST:PORT")
	f.IntVar(&cfg.Instances, "instances", 2, "limiter instances, each with its own connection pool")
	f.IntVar(&cfg.Requests, "requests", 400, "requests per round, fired at once")
	f.Int64Var(&cfg.Limit, "limit", 50, "requests admitted per window")
	f.DurationVar(&cfg.Window, "window", time.Minute, "window of the limit")
	f.IntVar(&cfg.Rounds, "rounds", 5, "rounds, each on a fresh key")
	f.StringVar(&format, "format", "csv", "output format: "+strings.Join(sim.Formats, ", "))
	return cmd
}

func newSimInstancesCmd() *cobra.Command {
	var n, requests int
	var limit int64
	var window time.Duration
	var format string
	cmd := &cobra.Command{
		Use:   "instances [--instances N] [--limit 50] [--window 1m] [--requests 400] [--format csv|table|json]",
		Short: "Instances that count in their own memory admit up to N times the limit",
		Long: `Instances sends --requests requests from one client, inside one window,
through a round-robin load balancer to 1, 2, … --instances instances that each
keep a limit of --limit per --window in their own memory, and prints what each
setup admitted: instances,limit,requests,admitted. With N instances a client
gets up to N × limit, which is why a shared store (sim race) is needed. It runs
on a virtual clock and needs no Redis.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			if n < 1 || n > 1000 || limit < 1 || window <= 0 || requests < 1 {
				return usageErr(fmt.Errorf("--instances (1 to 1000), --limit, --window and --requests must be positive"))
			}
			res, err := race.RunInstances(cmd.Context(), n, limit, window, requests)
			if err != nil {
				return err
			}
			t := sim.Table{Header: []string{"instances", "limit", "requests", "admitted"}}
			for _, r := range res {
				t.Rows = append(t.Rows, []string{strconv.Itoa(r.Instances), strconv.FormatInt(r.Limit, 10), strconv.Itoa(r.Requests), strconv.FormatInt(r.Admitted, 10)})
			}
			return t.Write(cmd.OutOrStdout(), format)
		},
	}
	f := cmd.Flags()
	f.IntVar(&n, "instances", 3, "largest number of instances")
	f.Int64Var(&limit, "limit", 50, "requests admitted per window, per instance")
	f.DurationVar(&window, "window", time.Minute, "window of the limit")
	f.IntVar(&requests, "requests", 400, "requests sent inside one window")
	f.StringVar(&format, "format", "csv", "output format: "+strings.Join(sim.Formats, ", "))
	return cmd
}

// openRedisStore opens a Redis store in caller-clock mode for a --store
// flag of the form redis://HOST:PORT[/DB], as the simulations need (their
// clock is virtual). openStore in sim.go has checked the scheme.
func openRedisStore(spec string) (portero.Store, error) {
	return redisstore.New(redisstore.Config{
		URL:   spec,
		Clock: redisstore.CallerClock,
		// A simulation runs far from real time: a fresh prefix per store
		// keeps runs apart, and a generous deadline keeps a slow machine
		// from changing the output.
		Prefix:  "portero-sim:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":",
		Timeout: 10 * time.Second,
	})
}
