package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/portero-rl/portero/internal/accesslog"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gatewaylog"
	"github.com/portero-rl/portero/internal/lifecycle"
	"github.com/portero-rl/portero/internal/logging"
	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/watch"
)

// newServeCmd builds `portero serve`: the gateway.
func newServeCmd() *cobra.Command {
	var configPath, listen, adminListen string
	var logs logFlags
	var watch bool
	var settle time.Duration
	var refusalLines int
	var drain time.Duration
	var access gatewaylog.Options
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: rate limits in front of your upstreams",
		Long: `serve runs Portero as a reverse proxy: every request passes the rules of
the configuration (stacked, all-or-nothing) and is refused with 429 and
Retry-After, or forwarded to its upstream with RateLimit headers added.
Without --config it runs the built-in configuration ('portero config
default'): a memory store, a sample policy and a demo upstream.

It reloads the configuration on SIGHUP and when the file changes, once the
file has settled; a bad one is refused, its errors logged. On SIGTERM it
drains (/readyz answers 503 for server.drain_period while requests are
still served; a second SIGTERM ends the drain), then lets in-flight
requests finish within server.shutdown_timeout. A Redis store that does not
answer at start serves under store.on_error until Redis answers.

--access-log writes one line per request (JSON, what 'portero replay'
reads, or text); SIGUSR1 reopens the file. Refusals are logged at INFO, at
most --log-refusals lines a second per rule. See docs/operations.md.`,
		Example: `  portero serve
  portero serve --config examples/gateway.yaml --access-log /var/log/portero/access.log
  portero serve --config portero.yaml --listen :8080 --admin-listen off --log-format json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			wo, err := watchOptions(settle)
			if err != nil {
				return err
			}
			var drainPeriod *time.Duration
			if cmd.Flags().Changed("drain-period") {
				if drain < 0 {
					return usageErr(fmt.Errorf("--drain-period %v: must not be negative", drain))
				}
				drainPeriod = &drain
			}
			sig, stop := lifecycle.NotifySignals()
			defer stop()
			err = server.Run(cmd.Context(), server.Options{
				DrainPeriod:  drainPeriod,
				ConfigPath:   configPath,
				Listen:       listen,
				AdminListen:  adminListen,
				Stdout:       cmd.OutOrStdout(),
				Logger:       logger,
				Reload:       sig.Reload,
				Hurry:        sig.Hurry,
				Watch:        watch && configPath != "",
				WatchOptions: wo,
				LogSampler:   logging.NewSampler(refusalLines),
				AccessLog:    access,
				Reopen:       sig.Reopen,
			})
			var ce config.Errors
			if errors.As(err, &ce) {
				return usageErr(err)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&configPath, "config", "c", "", "configuration file (YAML); empty for the built-in default")
	f.StringVar(&listen, "listen", "", "gateway address, overriding server.listen (such as :8080, or 127.0.0.1:0 for any free port)")
	f.StringVar(&adminListen, "admin-listen", "", `admin address, overriding admin.listen; "off" to disable`)
	f.BoolVar(&watch, "watch", true, "reload when the configuration file changes")
	addWatchSettle(f, &settle)
	f.DurationVar(&drain, "drain-period", config.DefaultDrainPeriod, "how long /readyz answers 503 before the listeners close on SIGTERM, overriding server.drain_period (0 for none)")
	f.IntVar(&refusalLines, "log-refusals", logging.DefaultPerSecond, "most refusal log lines a second per rule (0: every refusal, -1: none)")
	f.StringVar(&access.Path, "access-log", "", "access log file, - for standard output; empty for none (SIGUSR1 reopens it)")
	f.StringVar(&access.Format, "access-log-format", "json", "access log format: json (what portero replay reads) or text")
	f.IntVar(&access.Buffer, "access-log-buffer", accesslog.DefaultBuffer, "most access log lines waiting for the disk; beyond it lines are dropped and counted")
	f.StringSliceVar(&access.Headers, "access-log-header", nil, "request header to record as sent, besides those the configuration reads (repeatable; never the api_keys header)")
	logs.add(cmd)
	return cmd
}

// addWatchSettle adds --watch-settle, the watcher's settle period, to a
// command that watches its configuration.
func addWatchSettle(f *pflag.FlagSet, settle *time.Duration) {
	f.DurationVar(settle, "watch-settle", watch.DefaultSettle, "with --watch, how long a changed file must stay the same before it applies: a writer pausing longer mid-file would publish what it wrote so far")
}

// watchOptions returns the watcher's options for --watch-settle.
func watchOptions(settle time.Duration) (watch.Options, error) {
	if settle <= 0 {
		return watch.Options{}, usageErr(fmt.Errorf("--watch-settle %v: want more than zero", settle))
	}
	return watch.Options{Settle: settle}, nil
}
