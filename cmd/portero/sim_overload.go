package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/internal/sim"
	"github.com/portero-rl/portero/internal/sim/overloadsim"
)

// The experiments about protecting the whole service (package overload):
// each runs the real Gate (and, for the rate limit, the store) on a virtual
// clock and prints one table.

func newSimOverloadCmd() *cobra.Command {
	return overloadSimCmd("overload", "150 req/s to a service of 100 req/s: an unbounded queue, a bounded one with deadlines, and LIFO",
		`Overload offers 150 requests per second for 120 s to a service that completes
100 per second (10 at once, 100 ms each) behind an overload.Gate; clients give
up after 2 s. Three modes: unbounded-fifo (a queue that holds everything and
knows no deadline), bounded-deadline (200 places, FIFO, requests dropped the
moment they can no longer be answered in time and refused on arrival when
that moment would come before their turn) and lifo (the same, newest first).
The figures are measured over the last minute: throughput counts every
answer, goodput only those within the client's 2 s. --chart draws the
goodput per second over the run.`,
		func(cmd *cobra.Command) (experiment, error) { return overloadsim.RunOverload() })
}

func newSimNoisyCmd() *cobra.Command {
	return overloadSimCmd("noisy-neighbour", "30 small tenants and one noisy neighbour: random shedding against fair shedding",
		`Noisy-neighbour shares a service of 100 requests per second between 30 small
tenants sending 2 per second each (within a fair share of 100/31) and one large
tenant sending 140 per second, for 60 s: twice the capacity. Random shedding
drops requests regardless of tenant, so everyone loses about half; fair
shedding takes the excess from the tenant holding the most of the service.
--chart draws the share served per policy and class.`,
		func(cmd *cobra.Command) (experiment, error) { return overloadsim.RunNoisy() })
}

func newSimLittleCmd() *cobra.Command {
	return overloadSimCmd("little", "Little's law: a concurrency limit of 30 against a rate limit of 120/s as the service slows",
		`Little offers 200 requests per second to a concurrency limit of 30 (an
overload.Gate) and to a rate limit of 120 per second (a token bucket in the
--store) as the service time grows from 0.25 s to 0.5 s. The concurrency limit
admits C/S: 120 per second, then 60; the rate limit keeps admitting 120 while
the work in flight (L = rate x time) doubles from 30 to 60. Measured over 60 s
after 10 s of warm-up. --chart FILE draws the admissions in FILE and the work
in flight in FILE-in-flight.`,
		func(cmd *cobra.Command) (experiment, error) {
			return overloadsim.RunLittle(cmd.Context(), storeOpener(cmd))
		})
}

// experiment is what every experiment of "portero sim" gives: its figures
// and the charts that draw them.
type experiment interface {
	Table() sim.Table
	Charts(path string) ([]string, error)
}

// experimentCmd makes the command of one experiment: it prints the figures
// in --format (format is the default) and, given chartFlag, draws them.
func experimentCmd(use, short, long, format, chartFlag string, run func(*cobra.Command) (experiment, error)) *cobra.Command {
	var chartPath string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			if err := checkChart("--"+chartFlag, chartPath); err != nil {
				return err
			}
			res, err := run(cmd)
			if err != nil {
				return err
			}
			if err := res.Table().Write(cmd.OutOrStdout(), format); err != nil || chartPath == "" {
				return err
			}
			files, err := res.Charts(chartPath)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", strings.Join(files, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", format, "output format: "+strings.Join(sim.Formats, ", "))
	cmd.Flags().StringVar(&chartPath, chartFlag, "", "also draw the chart(s) to this .svg or .png file")
	return cmd
}

func overloadSimCmd(name, short, long string, run func(*cobra.Command) (experiment, error)) *cobra.Command {
	return experimentCmd(name+" [--format table|csv|json] [--chart FILE.svg|FILE.png]", short, long, "table", "chart", run)
}
