package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/internal/config"
)

// newConfigCmd builds `portero config`: validate and default.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check configuration files and show the built-in one",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "validate FILE...",
		Short: "Report every error of configuration files, with line and field",
		Long: `validate reads each file as 'portero serve --config' would and reports
every problem it finds, one a line, as FILE:LINE:COLUMN: FIELD: PROBLEM. An
environment variable the file names (admin.token_env) need not be set, nor
need the TLS files it names exist: they are listed as needs instead, so
that files can be checked where the secrets are not (CI); TLS files that
exist are checked. The exit status is 0 when every file is valid and 2 otherwise.`,
		Example: "  portero config validate portero.yaml examples/*.yaml",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			failed := 0
			for _, path := range args {
				c, err := config.LoadWith(path, config.Options{AllowUnsetEnv: true})
				if err != nil {
					failed++
					var ce config.Errors
					if errors.As(err, &ce) {
						for _, e := range ce {
							fmt.Fprintln(cmd.ErrOrStderr(), e)
						}
					} else {
						fmt.Fprintf(cmd.ErrOrStderr(), "%v\n", err)
					}
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%s)\n", path, c.Summary())
				for _, e := range c.Env {
					fmt.Fprintln(cmd.OutOrStdout(), e)
				}
				for _, n := range c.Files {
					fmt.Fprintln(cmd.OutOrStdout(), n)
				}
			}
			if failed > 0 {
				return usageErr(fmt.Errorf("config validate: %d of %d files invalid", failed, len(args)))
			}
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "default",
		Short: "Print the built-in configuration that 'portero serve' runs without --config",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(config.Default())
			return err
		},
	})
	return cmd
}
