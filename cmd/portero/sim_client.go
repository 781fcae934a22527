package main

import (
	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/internal/sim/retrysim"
)

// The client-side experiments (package client, the polite client): what
// retries do to a service that starts refusing.

func newSimRetryStormCmd() *cobra.Command {
	var cfg retrysim.StormConfig
	cmd := experimentCmd("retry-storm [--format table|csv|json] [--out FILE.svg|FILE.png]",
		"A service that starts refusing, and three kinds of client: immediate retries, per-request backoff, Portero's client",
		`Retry-storm sends --rate new requests per second to a service that accepts
200/s, then only 10/s during an incident (10 s to 40 s). Clients that retry at
once up to 3 times push the offered load to about 4x the demand; clients that
back off with full jitter, cap their attempts and honour Retry-After per
request only move the retries later; Portero's client, which shares what it
learns (Retry-After, RateLimit) across requests to the host, keeps the offered
load at what the service accepts.

The table shows the totals and the load per second; csv and json only the
per-second rows. --out draws the offered load over time.`, "table", "out",
		func(*cobra.Command) (experiment, error) {
			res, err := retrysim.RunRetryStorm(cfg)
			return res, usageErr(err)
		})
	f := cmd.Flags()
	f.Float64Var(&cfg.Rate, "rate", 0, "new requests per second (default 100)")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", 0, "attempts per request, the first included (default 4)")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the jitter")
	return cmd
}

func newSimHerdCmd() *cobra.Command {
	var cfg retrysim.HerdConfig
	cmd := experimentCmd("herd [--format table|csv|json] [--out FILE.svg|FILE.png]",
		"200 clients refused at the same instant: waves without jitter, spread with jitter",
		`Herd refuses --clients clients at t = 0, four times over. Without
Retry-After: without jitter they all wait 1, 2, 4 s and come back together at
1 s, 3 s and 7 s; with full jitter each wait is drawn uniformly from
[0, min(cap, base*2^(n-1))) and the retries spread out. Told Retry-After
(--retry-after, 1 s) on every refusal: waiting exactly that, they come back
together at 1 s, 2 s, 3 s; with the jitter Portero's client adds after it
(up to --retry-after-jitter, 1 s, never before the server's time) they spread.
The table prints the peak load per 100 ms of each; csv and json only the
per-bucket rows. --out draws the retries per 100 ms over time.`, "table", "out",
		func(*cobra.Command) (experiment, error) {
			res, err := retrysim.RunHerd(cfg)
			return res, usageErr(err)
		})
	f := cmd.Flags()
	f.IntVar(&cfg.Clients, "clients", 0, "clients refused at t = 0 (default 200)")
	f.Float64Var(&cfg.Capacity, "capacity", 0, "requests per second the service accepts after t = 0 (default 0: it keeps refusing)")
	f.DurationVar(&cfg.RetryAfter, "retry-after", 0, "the service's Retry-After in the retry-after variants (default 1s)")
	f.DurationVar(&cfg.RetryAfterJitter, "retry-after-jitter", 0, "most jitter added after Retry-After in the retry-after+jitter variant (default 1s, the client's)")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the jitter")
	return cmd
}
