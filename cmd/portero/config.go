package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/internal/config"
)

// newConfigCmd builds `portero config`: validate and default.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check configuration files and show the built-in one",
	}
	cmd.AddCommand(newValidateCmd())
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

// newValidateCmd builds `portero config validate`.
func newValidateCmd() *cobra.Command {
	var against string
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Report every error of configuration files, with line and field",
		Long: `validate reads each file as 'portero serve --config' would and reports
every problem it finds, one a line, as FILE:LINE:COLUMN: FIELD: PROBLEM. An
environment variable the file names (admin.token_env) need not be set, nor
need the TLS files it names exist: they are listed as needs instead, so
that files can be checked where the secrets are not (CI); TLS files that
exist are checked. Settings that load but may not do what they seem to
(a shape that holds nothing, a queue whose wait nothing bounds) are printed
as FILE:LINE:COLUMN: warning: FIELD: PROBLEM, as serve logs them.

With --against RUNNING, each valid file is compared with the configuration
RUNNING (the one in service), rule by rule: how many rules it adds, removes
and changes, by name, as the reload log says. A file cut short shows as
rules removed.

The exit status is 0 when every file is valid (warnings or not) and 2
otherwise.`,
		Example: "  portero config validate portero.yaml examples/*.yaml\n  portero config validate --against /etc/portero/portero.yaml portero.yaml",
		Args:    func(cmd *cobra.Command, args []string) error { return usageErr(cobra.MinimumNArgs(1)(cmd, args)) },
		RunE: func(cmd *cobra.Command, args []string) error {
			var base *config.Config
			if against != "" {
				c, err := config.LoadWith(against, config.Options{AllowUnsetEnv: true})
				if err != nil {
					printLoadErr(cmd.ErrOrStderr(), err)
					return usageErr(fmt.Errorf("config validate: --against %s is invalid", against))
				}
				base = c
			}
			failed := 0
			for _, path := range args {
				c, err := config.LoadWith(path, config.Options{AllowUnsetEnv: true})
				if err != nil {
					failed++
					printLoadErr(cmd.ErrOrStderr(), err)
					continue
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "%s: ok (%s)\n", path, c.Summary())
				if base != nil {
					fmt.Fprintf(out, "%s: against %s: %s\n", path, against, config.CompareRules(base, c))
				}
				for _, w := range c.Warnings {
					fmt.Fprintln(cmd.ErrOrStderr(), w)
				}
				for _, e := range c.Env {
					fmt.Fprintln(out, e)
				}
				for _, n := range c.Files {
					fmt.Fprintln(out, n)
				}
			}
			if failed > 0 {
				return usageErr(fmt.Errorf("config validate: %d of %d files invalid", failed, len(args)))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&against, "against", "", "a configuration to compare each valid file with, rule by rule (the one in service)")
	return cmd
}

// printLoadErr prints every error of a configuration that did not load,
// one a line.
func printLoadErr(w io.Writer, err error) {
	var ce config.Errors
	if !errors.As(err, &ce) {
		fmt.Fprintf(w, "%v\n", err)
		return
	}
	for _, e := range ce {
		fmt.Fprintln(w, e)
	}
}
