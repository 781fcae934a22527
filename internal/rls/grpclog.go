package rls

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc/grpclog"
)

// SetGRPCLogger sends grpc-go's own log lines to slog's default logger
// (which a command sets to its own, package logging), so that a command
// has one log stream in one format: grpc-go's info lines (connection
// events) at debug, its warnings and errors as such. Call it once, before
// any gRPC server or client starts (grpclog.SetLoggerV2 is not safe
// afterwards): main does.
func SetGRPCLogger() { grpclog.SetLoggerV2(grpcLogger{}) }

// grpcLogger is grpclog.LoggerV2 over slog.Default(), read at each line.
type grpcLogger struct{}

func (g grpcLogger) log(level slog.Level, msg string) {
	slog.Default().Log(context.Background(), level, "grpc: "+msg)
}

func (g grpcLogger) Info(args ...any)   { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any) { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Infof(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Warning(args ...any)   { g.log(slog.LevelWarn, fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any) { g.log(slog.LevelWarn, fmt.Sprint(args...)) }
func (g grpcLogger) Warningf(format string, args ...any) {
	g.log(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Error(args ...any)   { g.log(slog.LevelError, fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any) { g.log(slog.LevelError, fmt.Sprint(args...)) }
func (g grpcLogger) Errorf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Fatal(args ...any)   { g.log(slog.LevelError, fmt.Sprint(args...)); os.Exit(1) }
func (g grpcLogger) Fatalln(args ...any) { g.log(slog.LevelError, fmt.Sprint(args...)); os.Exit(1) }
func (g grpcLogger) Fatalf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// V reports whether grpc-go's verbose lines are wanted: only at debug.
func (g grpcLogger) V(int) bool { return slog.Default().Enabled(context.Background(), slog.LevelDebug) }
