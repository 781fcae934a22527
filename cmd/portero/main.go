// Command portero is Portero's one binary: the gateway (serve), the Envoy
// rate limit service and HTTP decision API (rls), and the tools around
// them (check, config, sim, plan, keys, replay).
//
// main is tiny on purpose: everything happens in run, which the tests call
// with their own arguments and writers.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/internal/rls"
)

func main() {
	rls.SetGRPCLogger() // grpc-go's lines through the command's logger
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, argsOf(os.Args), os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err))
}

// argsOf returns the command line of os.Args: as ratelimit (the name
// envoyproxy/ratelimit's image runs, /bin/ratelimit), Portero is that
// service, configured by its environment (portero rls --envoyproxy-env);
// so it is when its first argument is ratelimit or a path to it (portero
// /bin/ratelimit: Portero's image, whose entrypoint is portero, run with a
// compose file's "command: /bin/ratelimit").
func argsOf(osArgs []string) []string {
	args := osArgs[1:]
	switch {
	case len(osArgs) > 0 && filepath.Base(osArgs[0]) == "ratelimit":
	case len(args) > 0 && (args[0] == "ratelimit" || strings.HasSuffix(args[0], "/ratelimit")):
		args = args[1:]
	default:
		return args
	}
	return append([]string{"rls", "--envoyproxy-env"}, args...)
}

// run executes the command line args (without the program name), writing
// results to stdout and diagnostics to stderr. It prints the error, if any,
// to stderr before returning it; exitCode turns it into the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(os.Stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "portero: %v\n", err)
	}
	return err
}

// newRootCmd builds the command tree.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "portero",
		Short: "Portero, a rate limiter: the doorman in front of a service",
		Long: `Portero asks, for every request, "has this client used its share?",
lets it in or turns it away, and tells the client when to come back.`,
		SilenceErrors: true, // run prints the error once, with the program's name
		SilenceUsage:  true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.Version = version(debug.ReadBuildInfo())
	root.SetVersionTemplate("{{.Version}}\n")

	// --- Top-level commands: append one line per command, in its own file. ---
	root.AddCommand(newSimCmd())
	root.AddCommand(newServeCmd())
	root.AddCommand(newConfigCmd())
	root.AddCommand(newRLSCmd())
	root.AddCommand(newCheckCmd())
	root.AddCommand(newPlanCmd())
	root.AddCommand(newKeysCmd())
	root.AddCommand(newReplayCmd())
	// --- end of top-level commands ---
	root.SetHelpCommand(newHelpCmd())
	root.InitDefaultHelpCmd()
	strictTree(root)
	return root
}

// codeError carries an exit status of its own, for a command whose
// statuses say more than "failed" (portero check: 3 when no answer came).
type codeError struct {
	code int
	err  error
}

func (e codeError) Error() string { return e.err.Error() }
func (e codeError) Unwrap() error { return e.err }

// exitCode is the process exit status for run's error: 0 for none, 2 for a
// usage error (bad flag, bad argument, malformed input file), a
// codeError's own, 1 otherwise.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	var c codeError
	if errors.As(err, &c) {
		return c.code
	}
	return 1
}
