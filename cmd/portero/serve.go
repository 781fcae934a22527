package main

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/server"
)

// newServeCmd builds `portero serve`: the gateway.
func newServeCmd() *cobra.Command {
	var configPath, listen, adminListen, logLevel string
	var watch bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: rate limits in front of your upstreams",
		Long: `serve runs Portero as a reverse proxy: every request passes the rules of
the configuration (stacked, all-or-nothing) and is refused with 429 and
Retry-After, or forwarded to its upstream with RateLimit headers added.

Without --config it runs the built-in configuration (show it with
'portero config default'): a memory store, a sample policy and a demo
upstream, so that curl can watch the 429s at once.

It reloads the configuration on SIGHUP and when the file changes (a bad
file is refused, its errors logged, the running configuration kept), and
on SIGTERM or Ctrl-C stops accepting and lets in-flight requests finish.`,
		Example: `  portero serve
  portero serve --config examples/gateway.yaml
  portero serve --config portero.yaml --listen :8080 --admin-listen off`,
		Args: func(cmd *cobra.Command, args []string) error { return usageErr(cobra.NoArgs(cmd, args)) },
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usageErr(err)
			}
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			ctx := cmd.Context()

			// SIGHUP reloads; the goroutine ends with this command.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			reload := make(chan struct{})
			done := make(chan struct{})
			defer close(done)
			go func() {
				for {
					select {
					case <-hup:
						select {
						case reload <- struct{}{}:
						case <-done:
							return
						}
					case <-done:
						return
					}
				}
			}()

			err := server.Run(ctx, server.Options{
				ConfigPath:  configPath,
				Listen:      listen,
				AdminListen: adminListen,
				Stdout:      cmd.OutOrStdout(),
				Logger:      logger,
				Reload:      reload,
				Watch:       watch && configPath != "",
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
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
