package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestEveryCommandRefusesTheUnknown walks the whole command tree, so that
// a command added later is held to the same rules: an unknown subcommand
// or flag anywhere exits 2 and names the nearest known one, including a
// misspelt subcommand followed by its own flags (`plan quotaa --quota 5`)
// and `portero help` of a command that does not exist.
func TestEveryCommandRefusesTheUnknown(t *testing.T) {
	var walk func(cmd *cobra.Command, path []string)
	commands := 0
	walk = func(cmd *cobra.Command, path []string) {
		commands++
		line := func(extra ...string) []string { return append(append([]string{}, path...), extra...) }
		var flags []*pflag.Flag
		for _, fs := range []*pflag.FlagSet{cmd.LocalFlags(), cmd.InheritedFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if !f.Hidden {
					flags = append(flags, f)
				}
			})
		}
		expect(t, line("--zzqqx"), "unknown flag: --zzqqx")
		for _, f := range flags {
			expect(t, line("--"+f.Name+string(f.Name[len(f.Name)-1])), "did you mean --"+f.Name+"?")
		}
		if cmd.HasSubCommands() {
			expect(t, line("zzqqx"), `unknown command "zzqqx"`)
			if len(path) > 0 {
				expect(t, append([]string{"help"}, line("zzqqx")...), `unknown command "zzqqx"`)
			}
			for _, sub := range cmd.Commands() {
				if !sub.IsAvailableCommand() {
					continue
				}
				typo := sub.Name() + string(sub.Name()[len(sub.Name())-1])
				expect(t, line(typo), "did you mean "+sub.Name()+"?")
				// The subcommand's own flag after the typo: the typo is the mistake.
				sub.LocalFlags().VisitAll(func(f *pflag.Flag) {
					if cmd.Flags().Lookup(f.Name) == nil {
						expect(t, line(typo, "--"+f.Name, "1"), "did you mean "+sub.Name()+"?")
					}
				})
				walk(sub, line(sub.Name()))
			}
		}
	}
	// What a CI step with a typo runs: it must fail.
	expect(t, []string{"config", "valdiate", "portero.yaml"}, "did you mean validate?")
	expect(t, []string{"plan", "quotaa", "--quota", "500000/day"}, "did you mean quota?")
	walk(newRootCmd(), nil)
	if commands < 20 {
		t.Errorf("walked %d commands, want the whole tree (20 or more)", commands)
	}
}

// TestGroupAloneShowsHelp: a group that is only a group (its usage line
// is its name: plan is also a command of its own, with required flags) run
// without a subcommand shows its help and exits 0, the same for every one.
func TestGroupAloneShowsHelp(t *testing.T) {
	for _, cmd := range newRootCmd().Commands() {
		if !cmd.HasSubCommands() || !cmd.IsAvailableCommand() || cmd.Use != cmd.Name() {
			continue
		}
		out, errOut, code := runCmd(t, cmd.Name())
		if code != 0 || !strings.Contains(out, "Usage:") || errOut != "" {
			t.Errorf("portero %s: exit %d, stdout %q, stderr %q; want 0 and its help", cmd.Name(), code, out, errOut)
		}
	}
}

// expect runs args and fails t unless they exit 2 with want on stderr.
func expect(t *testing.T, args []string, want string) {
	t.Helper()
	out, errOut, code := runCmd(t, args...)
	if code != 2 || !strings.Contains(errOut, want) {
		t.Errorf("portero %s: exit %d, stdout %q, stderr %q; want 2 and %q", strings.Join(args, " "), code, out, errOut, want)
	}
}
