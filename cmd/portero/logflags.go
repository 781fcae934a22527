package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/internal/logging"
)

// logFlags are the logging flags every long-running command takes
// (--log-format, --log-level), so that serve and rls log alike.
type logFlags struct{ format, level string }

func (f *logFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.format, "log-format", "text", "log line format: "+strings.Join(logging.Formats, " or "))
	fs.StringVar(&f.level, "log-level", "info", "least severe level logged: "+strings.Join(logging.Levels, ", "))
}

// logger builds the command's one logger on w; a bad flag is a usage error
// that lists the values that exist.
func (f *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	if _, err := logging.ParseLevel(f.level); err != nil {
		return nil, usageErr(fmt.Errorf("--log-level: %w", err))
	}
	l, err := logging.New(w, f.format, f.level)
	if err != nil {
		return nil, usageErr(fmt.Errorf("--log-format: %w", err))
	}
	return l, nil
}
