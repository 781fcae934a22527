package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/portero-rl/portero/internal/chart"
	"github.com/portero-rl/portero/internal/config/fileerr"
)

// usageError marks a mistake in the command line or its input files: the
// user must change what they typed, so the exit status is 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usageErr wraps err as a usage error (exit status 2); nil stays nil.
func usageErr(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// checkOneOf is the usage error of a flag whose value v is none of
// allowed.
func checkOneOf(flag, v string, allowed ...string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return usageErr(fmt.Errorf("%s %q: want one of %s", flag, v, strings.Join(allowed, ", ")))
}

// checkChart is the usage error of a chart flag whose file is neither
// .svg nor .png; no file is no error.
func checkChart(flag, path string) error {
	if path == "" {
		return nil
	}
	if err := chart.CheckPath(path); err != nil {
		return usageErr(fmt.Errorf("%s: %w", flag, err))
	}
	return nil
}

// strictTree applies the command line's rules to cmd and every command
// under it, so that no command can forget them: an unknown command or flag
// is a usage error (exit status 2) that names the nearest known one; a
// group (a command with subcommands) treats any word as an unknown
// subcommand and, run alone, shows its help; a leaf without Args of its
// own takes no arguments. Cobra alone would show a group's help and exit 0
// for `portero config valdiate FILE`.
func strictTree(cmd *cobra.Command) {
	args := cmd.Args
	switch {
	case cmd.HasSubCommands():
		args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return nil
		}
		if !cmd.Runnable() {
			cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
	case args == nil:
		args = cobra.NoArgs
	}
	cmd.Args = func(cmd *cobra.Command, a []string) error { return usageErr(args(cmd, a)) }
	if !cmd.HasParent() {
		cmd.SetFlagErrorFunc(flagError)
	}
	for _, sub := range cmd.Commands() {
		strictTree(sub)
	}
}

// unknownCommand is the usage error for a word that names no subcommand
// of group.
func unknownCommand(group *cobra.Command, word string) error {
	var names []string
	for _, c := range group.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	msg := fmt.Sprintf("unknown command %q for %q", word, group.CommandPath())
	if s := fileerr.Suggest(word, names); s != "" {
		msg += "; did you mean " + s + "?"
	} else if len(names) > 0 {
		msg += " (its commands: " + strings.Join(names, ", ") + ")"
	}
	return usageErr(errors.New(msg))
}

// flagError turns cobra's flag errors into usage errors. An unknown flag
// after an unknown subcommand (`plan quotaa --quota 5`) is reported as the
// unknown subcommand, the mistake the user made; otherwise the error names
// the nearest flag of cmd.
func flagError(cmd *cobra.Command, err error) error {
	var unknown *pflag.NotExistError
	if !errors.As(err, &unknown) {
		return usageErr(err)
	}
	if words := cmd.Flags().Args(); cmd.HasSubCommands() && len(words) > 0 {
		return unknownCommand(cmd, words[0])
	}
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	name := unknown.GetSpecifiedName()
	if unknown.GetSpecifiedShortnames() != "" {
		return usageErr(err)
	}
	if s := fileerr.Suggest(name, names); s != "" {
		return usageErr(fmt.Errorf("%w; did you mean --%s?", err, s))
	}
	for _, sub := range cmd.Commands() {
		if sub.Flags().Lookup(name) != nil {
			return usageErr(fmt.Errorf("%w (a flag of %q)", err, sub.CommandPath()))
		}
	}
	return usageErr(err)
}

// newHelpCmd is `portero help [COMMAND...]`. Cobra's own shows the root's
// help, exit status 0, for a command that does not exist.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			target := cmd.Root()
			for _, word := range args {
				next, _, _ := target.Find([]string{word})
				if next == target {
					return unknownCommand(target, word)
				}
				target = next
			}
			return target.Help()
		},
	}
}
