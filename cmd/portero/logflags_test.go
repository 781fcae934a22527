package main

import (
	"context"
	"encoding/json"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/testenv"
)

// TestLogFlags: a level or format that does not exist is a usage error
// that lists the ones that do, for each command that logs.
func TestLogFlags(t *testing.T) {
	for _, cmd := range [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off"},
		{"rls", "--config", "../../examples/envoy/config", "--grpc-listen", "127.0.0.1:0", "--http-listen", "off"},
	} {
		for _, tt := range []struct{ flag, value, want string }{
			{"--log-level", "loud", `--log-level: log level "loud": want one of debug, info, warn, error`},
			{"--log-format", "xml", `--log-format: log format "xml": want one of text, json`},
		} {
			_, errOut, code := runCmd(t, append(cmd, tt.flag, tt.value)...)
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("portero %s %s %s: exit %d, stderr %q; want 2 and %q", cmd[0], tt.flag, tt.value, code, errOut, tt.want)
			}
		}
	}
}

// TestServeJSONLogs: with --log-format json every line serve writes to
// stderr is a JSON object with a level and a message.
func TestServeJSONLogs(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	out, errb := &testenv.Buffer{}, &testenv.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--drain-period", "0", "--log-format", "json"}, out, errb)
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "gateway listening"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s\n%s", out, errb)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, errb)
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if len(lines) < 1 || lines[0] == "" { // "shutting down" at least
		t.Fatalf("stderr has %d lines:\n%s", len(lines), errb)
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["level"] == nil || m["msg"] == nil {
			t.Errorf("stderr line %q is not a JSON log record: %v", l, err)
		}
	}
}

// TestRLSListenDefaults: every listener of portero rls binds loopback by
// default, on ports that serve's listeners (8080, 9090) do not use.
// (lifecycle's TestWarnExposed covers the warning for a listener bound
// elsewhere.)
func TestRLSListenDefaults(t *testing.T) {
	cmd := newRLSCmd()
	defaults := map[string]string{"grpc-listen": "127.0.0.1:8081", "http-listen": "127.0.0.1:8082", "admin-listen": "127.0.0.1:9091"}
	for flag, want := range defaults {
		if got := cmd.Flags().Lookup(flag).DefValue; got != want {
			t.Errorf("--%s defaults to %q, want %q", flag, got, want)
		}
		for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:9090"} { // config.DefaultListen, DefaultAdminListen
			if addr == want {
				t.Errorf("--%s clashes with serve's %s", flag, addr)
			}
		}
	}
}

// TestNoStandardLog: every line goes through slog; no package of the
// module (but bench/, a module of its own) uses the standard log package.
func TestNoStandardLog(t *testing.T) {
	root := "../.."
	fset := token.NewFileSet()
	var bad []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "log" {
				bad = append(bad, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("these files import the standard log package; log through slog instead: %v", bad)
	}
	// And the commands hand their one logger on: no package falls back to
	// a text handler of its own on os.Stderr.
	re := regexp.MustCompile(`slog\.NewTextHandler\(os\.Stderr`)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") && !strings.Contains(p, "/bench/") {
			if b, _ := os.ReadFile(p); re.Match(b) {
				t.Errorf("%s builds a logger of its own on os.Stderr", p)
			}
		}
		return nil
	})
}
