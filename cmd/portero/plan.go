package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/plan"
	"github.com/portero-rl/portero/policy"
)

// planFormats are the outputs of `portero plan` and `portero plan quota`.
var planFormats = []string{"table", "json", "yaml"}

// newPlanCmd builds `portero plan`, the pencil-and-paper sizing of a
// limit from the narrowest resource (package internal/plan), and `portero
// plan quota`.
func newPlanCmd() *cobra.Command {
	var (
		capacity, margin, units, format, name, key string
		latency                                    time.Duration
		burst                                      int64
	)
	cmd := &cobra.Command{
		Use:   "plan --capacity N --margin P --units-per-request U --latency D",
		Short: "Size a limit backwards from the narrowest resource: rate, burst and concurrency",
		Long: `plan computes a limit from the narrowest resource behind Portero, as the
pencil-and-paper method does: the bottleneck sustains CAPACITY units per second;
keep MARGIN in reserve for peaks and retries; each request costs U units; so the
rate is CAPACITY × (1 − MARGIN) ÷ U requests per second (rounded down). The
burst defaults to the rate; plan warns when a burst's units exceed what the
bottleneck does in a second. Little's law gives the concurrency: rate × mean
latency requests in flight (rounded up), what the service behind must hold.

--format yaml writes a Portero configuration with that limit, which
'portero config validate' accepts: edit its upstream and serve it.

'portero plan quota' says how long a quota lasts at a steady rate.`,
		Example: "  portero plan --capacity 1000 --margin 30% --units-per-request 2 --latency 200ms\n" +
			"  portero plan --capacity 1000 --margin 30% --units-per-request 2 --latency 200ms --format yaml > portero.yaml",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOneOf("--format", format, planFormats...); err != nil {
				return err
			}
			if capacity == "" || latency == 0 {
				return usageErr(errors.New("--capacity and --latency are required: the units per second the narrowest resource sustains, and the mean time a request takes"))
			}
			if err := policy.ValidName(name); err != nil {
				return usageErr(fmt.Errorf("--name: %v", err))
			}
			if _, err := policy.ParseKey(key); err != nil {
				return usageErr(fmt.Errorf("--key: %v", err))
			}
			in := plan.Input{Latency: latency, Burst: burst}
			var err error
			if in.Capacity, err = plan.ParseQuantity(capacity); err != nil {
				return usageErr(fmt.Errorf("--capacity %v", err))
			}
			if in.Margin, err = plan.ParseMargin(margin); err != nil {
				return usageErr(fmt.Errorf("--margin %v", err))
			}
			if in.UnitsPerRequest, err = plan.ParseQuantity(units); err != nil {
				return usageErr(fmt.Errorf("--units-per-request %v", err))
			}
			p, err := plan.Size(in)
			if err != nil {
				return usageErr(err)
			}
			return writePlan(cmd.OutOrStdout(), format, in, p, name, key)
		},
	}
	f := cmd.Flags()
	f.StringVar(&capacity, "capacity", "", "units per second the narrowest resource sustains (required), such as 1000")
	f.StringVar(&margin, "margin", "30%", "share of the capacity kept for peaks and retries: a percentage (30%) or a fraction (0.3)")
	f.StringVar(&units, "units-per-request", "1", "units of the resource one request costs, such as 2")
	f.DurationVar(&latency, "latency", 0, "mean time a request takes (required), such as 200ms")
	f.Int64Var(&burst, "burst", 0, "the burst you want, in requests; the default is the rate")
	f.StringVar(&format, "format", "table", "output: "+strings.Join(planFormats, ", "))
	f.StringVar(&name, "name", "bottleneck", "the rule's name in --format yaml")
	f.StringVar(&key, "key", "global", "the rule's key in --format yaml: global protects the bottleneck from everyone together")
	cmd.AddCommand(newPlanQuotaCmd())
	return cmd
}

// planJSON is `portero plan --format json`.
type planJSON struct {
	Rate            int64    `json:"rate"`
	Burst           int64    `json:"burst"`
	Concurrency     int64    `json:"concurrency"`
	MaxBurst        int64    `json:"max_burst"`
	Target          float64  `json:"target_units_per_second"`
	Capacity        float64  `json:"capacity"`
	Margin          float64  `json:"margin"`
	UnitsPerRequest float64  `json:"units_per_request"`
	LatencySeconds  float64  `json:"latency_seconds"`
	Warnings        []string `json:"warnings"`
}

func writePlan(w io.Writer, format string, in plan.Input, p plan.Plan, name, key string) error {
	d := func(r *big.Rat) string { return plan.Decimal(r, 3) }
	pct := plan.Decimal(new(big.Rat).Mul(in.Margin, big.NewRat(100, 1)), 3) + "%"
	burstWhy := "requests at once: the rate, an honest start; raise it with a reason"
	if in.Burst > 0 {
		burstWhy = "requests at once, as chosen"
	}
	switch format {
	case "json":
		out := planJSON{Rate: p.Rate, Burst: p.Burst, Concurrency: p.Concurrency, MaxBurst: p.MaxBurst,
			Target: plan.Float(p.Target), Capacity: plan.Float(in.Capacity), Margin: plan.Float(in.Margin),
			UnitsPerRequest: plan.Float(in.UnitsPerRequest), LatencySeconds: in.Latency.Seconds(), Warnings: p.Warnings}
		if out.Warnings == nil {
			out.Warnings = []string{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	case "yaml":
		var b strings.Builder
		fmt.Fprintf(&b, "# Sized by portero plan --capacity %s --margin %s --units-per-request %s --latency %v", d(in.Capacity), pct, d(in.UnitsPerRequest), in.Latency)
		if in.Burst > 0 {
			fmt.Fprintf(&b, " --burst %d", in.Burst)
		}
		fmt.Fprintf(&b, "\n#   the bottleneck sustains %s units/s; %s kept in reserve leaves %s units/s;\n", d(in.Capacity), pct, d(p.Target))
		fmt.Fprintf(&b, "#   at %s units per request the rate is %d requests/s, the burst %d.\n", d(in.UnitsPerRequest), p.Rate, p.Burst)
		fmt.Fprintf(&b, "#   Little's law: %d/s × %v = %d requests in flight: size the service's\n", p.Rate, in.Latency, p.Concurrency)
		fmt.Fprintf(&b, "#   pool (or reserved concurrency) for %d, with its own margin.\n", p.Concurrency)
		for _, warn := range p.Warnings {
			fmt.Fprintf(&b, "# WARNING: %s\n", warn)
		}
		b.WriteString(planUpstream)
		fmt.Fprintf(&b, "rules:\n  - name: %s\n    key: %q\n    algorithm: token-bucket\n    limit: %s\n",
			name, key, portero.Limit{Count: p.Rate, Window: time.Second, Burst: p.Burst})
		_, err := io.WriteString(w, b.String())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "rate\t%d/s\t%s units/s × (1 − %s) = %s units/s, ÷ %s units per request\n", p.Rate, d(in.Capacity), pct, d(p.Target), d(in.UnitsPerRequest))
	fmt.Fprintf(tw, "burst\t%d\t%s\n", p.Burst, burstWhy)
	fmt.Fprintf(tw, "concurrency\t%d\tin flight: %d/s × %v (Little's law)\n", p.Concurrency, p.Rate, in.Latency)
	fmt.Fprintf(tw, "max burst\t%d\twhat the bottleneck absorbs at once: %s units ÷ %s units per request\n", p.MaxBurst, d(in.Capacity), d(in.UnitsPerRequest))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, warn := range p.Warnings {
		if _, err := fmt.Fprintf(w, "warning: %s\n", warn); err != nil {
			return err
		}
	}
	return nil
}

// planUpstream is the part of a generated configuration the operator edits.
const planUpstream = `upstreams:
  api:
    url: http://127.0.0.1:3000   # your service
routes:
  - upstream: api
`

// newPlanQuotaCmd builds `portero plan quota`.
func newPlanQuotaCmd() *cobra.Command {
	var quota, rate, format, key string
	cmd := &cobra.Command{
		Use:   "quota --quota Q --rate R",
		Short: "How long a quota lasts for a client that keeps within its rate",
		Long: `quota says when a client that sends a steady RATE spends a QUOTA: a client within
its rate can still spend a day's or a month's quota early, which is why a quota is a
limit of its own. It also gives the steady rate at which the quota lasts the whole
period. A calendar period is read at its nominal length (24 h, 7 or 30 days).`,
		Example: "  portero plan quota --quota 500000/day --rate 10/s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOneOf("--format", format, planFormats...); err != nil {
				return err
			}
			if quota == "" || rate == "" {
				return usageErr(errors.New("--quota and --rate are required, such as --quota 500000/day --rate 10/s"))
			}
			if _, err := policy.ParseKey(key); err != nil {
				return usageErr(fmt.Errorf("--key: %v", err))
			}
			ql, err := portero.ParseLimit(quota)
			if err != nil {
				return usageErr(fmt.Errorf("--quota: %w", err))
			}
			rl, err := portero.ParseLimit(rate)
			if err != nil {
				return usageErr(fmt.Errorf("--rate: %w", err))
			}
			q, err := plan.Quota(ql, rl)
			if err != nil {
				return usageErr(err)
			}
			return writeQuota(cmd.OutOrStdout(), format, ql, rl, q, key)
		},
	}
	f := cmd.Flags()
	f.StringVar(&quota, "quota", "", "the quota (required), such as 500000/day or 100000/month")
	f.StringVar(&rate, "rate", "", "the client's steady rate (required), such as 10/s")
	f.StringVar(&format, "format", "table", "output: "+strings.Join(planFormats, ", "))
	f.StringVar(&key, "key", "header:X-API-Key", "the rules' key in --format yaml: whose quota is counted")
	return cmd
}

// quotaJSON is `portero plan quota --format json`.
type quotaJSON struct {
	Quota           int64   `json:"quota"`
	Period          string  `json:"period"`
	PeriodSeconds   float64 `json:"period_seconds"`
	Rate            float64 `json:"rate"`
	RunsOutSeconds  float64 `json:"runs_out_after_seconds"`
	RunsOutHours    float64 `json:"runs_out_after_hours"`
	Lasts           bool    `json:"lasts_the_period"`
	SustainableRate float64 `json:"sustainable_rate"`
}

func writeQuota(w io.Writer, format string, ql, rl portero.Limit, q plan.QuotaRun, key string) error {
	hours := new(big.Rat).Quo(q.Seconds, big.NewRat(3600, 1))
	period := ql.Window.String()
	if ql.IsCalendar() {
		period = ql.Period.String()
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(quotaJSON{Quota: q.Quota, Period: period, PeriodSeconds: q.Period.Seconds(), Rate: plan.Float(q.Rate),
			RunsOutSeconds: plan.Float(q.Seconds), RunsOutHours: plan.Float(hours), Lasts: q.Lasts, SustainableRate: plan.Float(q.Sustainable)})
	case "yaml":
		var b strings.Builder
		fmt.Fprintf(&b, "# portero plan quota --quota %q --rate %q\n", ql.String(), rl.String())
		fmt.Fprintf(&b, "#   at %s/s the quota runs out after %s s (%s h)%s;\n", plan.Decimal(q.Rate, 3), plan.Decimal(q.Seconds, 1), plan.Decimal(hours, 1), quotaTail(q, hours, period))
		fmt.Fprintf(&b, "#   it lasts the %s at %s/s or less.\n", period, plan.Decimal(q.Sustainable, 3))
		b.WriteString(planUpstream)
		fmt.Fprintf(&b, "rules:\n  - name: rate\n    key: %q\n    algorithm: token-bucket\n    limit: %s\n", key, rl)
		fmt.Fprintf(&b, "  - name: quota\n    key: %q\n    limit: %s\n", key, ql)
		_, err := io.WriteString(w, b.String())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "quota\t%s\t%d per %s (%s h)\n", ql, q.Quota, period, plan.Decimal(big.NewRat(int64(q.Period), int64(time.Hour)), 1))
	fmt.Fprintf(tw, "rate\t%s/s\t%s\n", plan.Decimal(q.Rate, 3), rl)
	fmt.Fprintf(tw, "runs out after\t%s s\t%s h%s\n", plan.Decimal(q.Seconds, 1), plan.Decimal(hours, 1), quotaTail(q, hours, period))
	fmt.Fprintf(tw, "sustainable\t%s/s\tthe steady rate at which the quota lasts the %s\n", plan.Decimal(q.Sustainable, 3), period)
	return tw.Flush()
}

// quotaTail says what follows the quota's end within the period.
func quotaTail(q plan.QuotaRun, hours *big.Rat, period string) string {
	if q.Lasts {
		return ", after the " + period + " is over: it lasts"
	}
	left := new(big.Rat).Sub(big.NewRat(int64(q.Period), int64(time.Hour)), hours)
	return fmt.Sprintf(", then requests are refused for the last %s h of the %s", plan.Decimal(left, 1), period)
}
