package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/store/redisstore"
)

// TestDialInBackground: with Redis down when the store is made, New fails
// by default; with DialInBackground it returns a store whose calls fail
// with ErrStoreUnavailable alone (the caller's failure policy answers), and
// which switches to Redis by itself once a real
// redis-server starts on the address. Close stops the dialler.
func TestDialInBackground(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill() // the address is known, nothing answers
	if _, err := redisstore.New(redisstore.Config{URL: srv.URL()}); err == nil {
		t.Fatal("New with Redis down and no DialInBackground: no error")
	}
	log := &testenv.Buffer{}
	s := newStore(t, srv, redisstore.Config{DialInBackground: true, Timeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if s.Connected() {
		t.Fatal("Connected() = true with nothing listening")
	}
	rule := portero.Rule{Name: "r", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 3, Window: time.Hour}}
	call := func() (portero.Decision, error) {
		d, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: "k", Cost: 1}})
		if len(d) != 1 {
			if d != nil {
				t.Fatalf("%d decisions beside %v", len(d), err)
			}
			return portero.Decision{}, err
		}
		return d[0], err
	}
	for range 5 {
		if _, err := call(); !errors.Is(err, portero.ErrStoreUnavailable) {
			t.Fatalf("before Redis answers: %v; want ErrStoreUnavailable and no decision", err)
		}
	}
	if st := s.Stats(); st.Unavailable != 5 || st.Redis != 0 || !st.Degraded {
		t.Errorf("stats before Redis answers: %+v, want 5 unanswered calls, none decided by Redis", st)
	}
	srv.Restart()
	deadline := time.Now().Add(20 * time.Second)
	for !s.Connected() {
		if time.Now().After(deadline) {
			t.Fatalf("not connected 20 s after redis-server started:\n%s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	allowed := 0
	for range 5 {
		d, err := call()
		if err != nil {
			t.Fatalf("after Redis answers: %v", err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if st := s.Stats(); allowed != 3 || st.Redis != 5 || st.Degraded {
		t.Errorf("after Redis answers: %d of 5 allowed (want the limit's 3, counted in Redis), stats %+v", allowed, st)
	}
	for _, want := range []string{"redis does not answer", "connected to redis"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	// A store that never connects stops dialling on Close.
	dead := redistest.Start(t)
	dead.Kill()
	d, err := redisstore.New(redisstore.Config{URL: dead.URL(), DialInBackground: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d.Connected() {
		t.Error("connected after Close")
	}
}
