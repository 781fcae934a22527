package rls

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestGRPCLogger: grpc-go's lines go to slog's default logger, info at
// debug level, warnings and errors as such.
func TestGRPCLogger(t *testing.T) {
	old := slog.Default()
	defer slog.SetDefault(old)
	var b bytes.Buffer
	slog.SetDefault(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelInfo})))
	var g grpcLogger
	g.Infof("connecting to %s", "x")
	g.Warningf("transport: %d", 1)
	g.Errorln("boom")
	out := b.String()
	if strings.Contains(out, "connecting") || !strings.Contains(out, `level=WARN msg="grpc: transport: 1"`) || !strings.Contains(out, `level=ERROR msg="grpc: boom"`) {
		t.Errorf("log:\n%s", out)
	}
	if g.V(2) {
		t.Error("V(2) = true at info level")
	}
}
