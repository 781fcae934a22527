package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/internal/chart"
	"github.com/portero-rl/portero/internal/sim/retrysim"
)

// The client-side experiments (package client, the polite client): what
// retries do to a service that starts refusing.

func newSimRetryStormCmd() *cobra.Command {
	var (
		cfg    retrysim.StormConfig
		format string
		out    string
	)
	cmd := &cobra.Command{
		Use:   "retry-storm [--format table|csv] [--out FILE.svg|FILE.png]",
		Short: "A service that starts refusing, and three kinds of client: immediate retries, per-request backoff, Portero's client",
		Long: `Retry-storm sends --rate new requests per second to a service that accepts
200/s, then only 10/s during an incident (10 s to 40 s). Clients that retry at
once up to 3 times push the offered load to about 4x the demand; clients that back off with full jitter, cap their attempts and honour
Retry-After per request only move the retries later; Portero's client, which
shares what it learns (Retry-After, RateLimit) across requests to the host,
keeps the offered load at what the service accepts.

The table shows the totals and the load per second; csv only the per-second
rows. --out draws the offered load over time.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkClientSimFlags(format, out); err != nil {
				return err
			}
			res, err := retrysim.RunRetryStorm(cfg)
			if err != nil {
				return usageErr(err)
			}
			return writeClientSim(cmd, res, format, out, "Retry storm: requests reaching the service", "requests per second")
		},
	}
	f := cmd.Flags()
	f.Float64Var(&cfg.Rate, "rate", 0, "new requests per second (default 100)")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", 0, "attempts per request, the first included (default 4)")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the jitter")
	f.StringVar(&format, "format", "table", "output format: table or csv")
	f.StringVar(&out, "out", "", "also draw the load over time to this .svg or .png file")
	return cmd
}

func newSimHerdCmd() *cobra.Command {
	var (
		cfg    retrysim.HerdConfig
		format string
		out    string
	)
	cmd := &cobra.Command{
		Use:   "herd [--format table|csv] [--out FILE.svg|FILE.png]",
		Short: "200 clients refused at the same instant: waves without jitter, spread with jitter",
		Long: `Herd refuses --clients clients at t = 0, four times over. Without
Retry-After: without jitter they all wait 1, 2, 4 s and come back together at
1 s, 3 s and 7 s; with full jitter each wait is drawn uniformly from
[0, min(cap, base*2^(n-1))) and the retries spread out. Told Retry-After
(--retry-after, 1 s) on every refusal: waiting exactly that, they come back
together at 1 s, 2 s, 3 s; with the jitter Portero's client adds after it
(up to --retry-after-jitter, 1 s, never before the server's time) they spread.
The table prints the peak load per 100 ms of each; csv only the per-bucket
rows. --out draws the retries per 100 ms over time.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkClientSimFlags(format, out); err != nil {
				return err
			}
			res, err := retrysim.RunHerd(cfg)
			if err != nil {
				return usageErr(err)
			}
			return writeClientSim(cmd, res, format, out, "Thundering herd: retries reaching the service", "retries per 100 ms")
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Clients, "clients", 0, "clients refused at t = 0 (default 200)")
	f.Float64Var(&cfg.Capacity, "capacity", 0, "requests per second the service accepts after t = 0 (default 0: it keeps refusing)")
	f.DurationVar(&cfg.RetryAfter, "retry-after", 0, "the service's Retry-After in the retry-after variants (default 1s)")
	f.DurationVar(&cfg.RetryAfterJitter, "retry-after-jitter", 0, "most jitter added after Retry-After in the retry-after+jitter variant (default 1s, the client's)")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the jitter")
	f.StringVar(&format, "format", "table", "output format: table or csv")
	f.StringVar(&out, "out", "", "also draw the retries over time to this .svg or .png file")
	return cmd
}

func checkClientSimFlags(format, out string) error {
	if err := checkOneOf("--format", format, "table", "csv"); err != nil {
		return err
	}
	return checkChart("--out", out)
}

// clientSimResult is what both experiments' results offer.
type clientSimResult interface {
	WriteTable(w io.Writer, format string) error
	Series() (names []string, t []float64, values [][]float64)
}

func writeClientSim(cmd *cobra.Command, res clientSimResult, format, out, title, ylabel string) error {
	if err := res.WriteTable(cmd.OutOrStdout(), format); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	names, t, values := res.Series()
	series := make([]chart.Series, len(names))
	for i, name := range names {
		series[i] = chart.Series{Name: name, X: t, Y: values[i], Step: true}
	}
	if err := chart.Lines(out, title, "time (s)", ylabel, series); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", out)
	return nil
}
