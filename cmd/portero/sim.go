package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/sim"
	"github.com/portero-rl/portero/store/memstore"
)

// newSimCmd is the "sim" group: experiments on a virtual clock.
func newSimCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Experiments on a virtual clock: replay traces, compare algorithms",
	}
	cmd.PersistentFlags().String("store", "memory", `where the simulated state lives: "memory", the in-process store, or redis://HOST:PORT[/DB] (caller clock)`)

	// --- sim subcommands: append one line per subcommand, defined in its own file. ---
	cmd.AddCommand(newSimReplayCmd())
	cmd.AddCommand(newSimBurstCmd())
	cmd.AddCommand(newSimRedisCmds()...)
	cmd.AddCommand(newSimRetryStormCmd())
	cmd.AddCommand(newSimHerdCmd())
	cmd.AddCommand(newSimOverloadCmd())
	cmd.AddCommand(newSimNoisyCmd())
	cmd.AddCommand(newSimLittleCmd())
	cmd.AddCommand(newSimFleetCmd())
	// --- end of sim subcommands ---
	return cmd
}

// openStore opens the portero.Store named by a --store flag value. It is the
// one place that knows the store kinds: add a case here for a new backend
// (such as "redis://host:port/db").
func openStore(spec string) (portero.Store, error) {
	switch {
	case spec == "" || spec == "memory":
		// The simulations run on a virtual clock that starts at the Unix
		// epoch: the sweeper, which reads the wall clock, would see all their
		// state as long expired, so it is off. Nothing is lost: a replay's
		// keys are few and the store lives for one command.
		return memstore.New(memstore.Config{SweepInterval: -1})
	case strings.HasPrefix(spec, "redis://") || strings.HasPrefix(spec, "rediss://"):
		return openRedisStore(spec)
	}
	return nil, usageErr(fmt.Errorf("--store %q: unknown store, want \"memory\" or redis://HOST:PORT[/DB]", spec))
}

// storeOpener returns a function that opens a fresh store as cmd's --store
// flag says.
func storeOpener(cmd *cobra.Command) func() (portero.Store, error) {
	spec, _ := cmd.Flags().GetString("store")
	return func() (portero.Store, error) { return openStore(spec) }
}

func newSimReplayCmd() *cobra.Command {
	var (
		algName, format, tracePath string
		count, burst               int64
		window                     time.Duration
		rate                       float64
	)
	cmd := &cobra.Command{
		Use:   "replay --algorithm NAME --limit L --window W --trace FILE",
		Short: "Replay a trace of requests through one algorithm and print every decision",
		Long: `Replay reads a trace (CSV lines time,key[,cost]; time in decimal seconds
since the start, never decreasing; cost 1 by default; an optional header line)
and prints one row per request: time,key,cost,allowed,remaining,retry_after,
plus departure for leaky-queue. Trace time 0 is the Unix epoch, so fixed
windows start at trace times 0, W, 2W, ...

The buckets, GCRA and the queue read --limit L --window W as rate L/W per
second and capacity L, unless --rate (per second) or --burst says otherwise.
A request whose cost the rule can never admit at once is refused with
retry_after "never" (null in JSON), as serve and rls refuse it. A malformed
trace is an error naming its line (exit status 2), and then no decision is
printed.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Checked here rather than with MarkFlagRequired so that a missing
			// flag is a usage error (exit status 2) like any other.
			for _, name := range []string{"algorithm", "limit", "window", "trace"} {
				if !cmd.Flags().Changed(name) {
					return usageErr(fmt.Errorf("--%s is required", name))
				}
			}
			alg, err := portero.ParseAlgorithm(algName)
			if err != nil {
				return usageErr(fmt.Errorf("--algorithm: %w", err))
			}
			if err := checkFormat(format); err != nil {
				return err
			}
			rule := portero.Rule{Name: "replay", Algorithm: alg, Limit: portero.Limit{Count: count, Window: window, Burst: burst, Rate: rate}}
			if err := rule.Limit.Validate(); err != nil {
				return usageErr(err)
			}
			trace, err := readTrace(tracePath)
			if err != nil {
				return err
			}
			store, err := storeOpener(cmd)()
			if err != nil {
				return err
			}
			defer store.Close(cmd.Context())
			results, err := sim.Replay(cmd.Context(), store, rule, trace)
			if err != nil {
				if errors.Is(err, sim.ErrMalformedTrace) {
					return usageErr(fmt.Errorf("trace %s: %w", tracePath, err))
				}
				return err
			}
			return sim.WriteResults(cmd.OutOrStdout(), format, results, alg == portero.LeakyQueue)
		},
	}
	f := cmd.Flags()
	f.StringVar(&algName, "algorithm", "", "algorithm: "+joinAlgorithms(portero.Algorithms))
	f.Int64Var(&count, "limit", 0, "limit L: requests (cost units) per window")
	f.DurationVar(&window, "window", 0, "window W, a Go duration such as 1s or 500ms")
	f.Int64Var(&burst, "burst", 0, "capacity B of the buckets, GCRA and the queue (default L)")
	f.Float64Var(&rate, "rate", 0, "rate R per second of the buckets, GCRA and the queue (default L/W)")
	f.StringVar(&tracePath, "trace", "", `trace file (CSV time,key[,cost]); "-" reads standard input`)
	f.StringVar(&format, "format", "csv", "output format: "+strings.Join(sim.Formats, ", "))
	return cmd
}

// readTrace parses the whole trace at path ("-" for standard input).
func readTrace(path string) ([]sim.Request, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, usageErr(fmt.Errorf("trace: %w", err))
		}
		defer f.Close()
		r = f
	}
	trace, err := sim.ParseTrace(r)
	if err != nil {
		if errors.Is(err, sim.ErrMalformedTrace) {
			return nil, usageErr(fmt.Errorf("trace %s: %w", path, err))
		}
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return trace, nil
}

func newSimBurstCmd() *cobra.Command {
	return experimentCmd("burst [--format csv|table|json] [--out FILE.svg|FILE.png]",
		"The burst experiment: five algorithms, the same 80 requests",
		`Burst sends the same 80 requests from one client (see docs/algorithms.md and
testdata/burst.csv) to fixed-window, sliding-log, sliding-counter, token-bucket
and leaky-queue, each with limit 10 per 1 s window (capacity 10 and 10/s for the
buckets), and prints the largest number each let through in any interval
[s, s+1s): admissions, or departures for the queue.

With --out FILE.svg (or .png) it also draws two charts: the figures as bars in
FILE.svg, and each algorithm's cumulative throughput over time in
FILE-over-time.svg.`, "csv", "out",
		func(cmd *cobra.Command) (experiment, error) {
			return sim.RunBurst(cmd.Context(), storeOpener(cmd), sim.BurstAlgorithms, sim.BurstLimit, sim.BurstTrace())
		})
}

// checkFormat checks a --format flag against the formats sim.Table writes.
func checkFormat(format string) error {
	return checkOneOf("--format", format, sim.Formats...)
}

func joinAlgorithms(algs []portero.Algorithm) string {
	s := make([]string, len(algs))
	for i, a := range algs {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}
