package redisstore

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/testenv"
)

// A call's end changes its node's state only if the state did not change
// since the call began: at a crash, an answer already on its way when
// another call found the connection gone must not say that the node
// answers again (and the next failure then say it is gone again), nor a
// failure on the old connection, after the node answered again, say it is
// gone.
func TestNodeStateIgnoresCallsOlderThanItsChange(t *testing.T) {
	log := &testenv.Buffer{}
	s, err := New(Config{Client: neverAnswers{}, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	n := s.newNode("0-5460", "127.0.0.1:7000")
	start := func() func(error) error {
		done, err := n.allow()
		if err != nil {
			t.Fatal(err)
		}
		return done
	}

	answerInFlight, failing := start(), start()
	failing(io.ErrUnexpectedEOF) // the master died: down
	answerInFlight(nil)          // answered before it died, read after
	if !n.down.Load() {
		t.Fatal("an answer from before the crash marked the node up")
	}
	oldConn := start()
	start()(nil) // the new master answers: up
	if n.down.Load() {
		t.Fatal("an answer after the crash left the node down")
	}
	oldConn(io.ErrUnexpectedEOF) // began before the node answered again
	if n.down.Load() {
		t.Fatal("a failure from before the node answered again marked it down")
	}
	if lines := log.String(); strings.Count(lines, "unavailable: the callers'") != 1 || strings.Count(lines, "answers again") != 1 {
		t.Errorf("want one line each way:\n%s", lines)
	}
}
