package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/internal/tlsreload"
	"github.com/portero-rl/portero/internal/tlstest"
	"github.com/portero-rl/portero/internal/watch"
)

func TestWarnExposed(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	cert, key := ca.Server(t).Write(t, dir, "s")
	tlsR, err := tlsreload.New(tlsreload.Files{CertFile: cert, KeyFile: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		l    Listener
		want string // "" no line; else the level and a phrase
	}{
		{"loopback", Listener{Name: "HTTP", Addr: "127.0.0.1:8082"}, ""},
		{"loopback v6", Listener{Name: "gRPC", Addr: "[::1]:8081"}, ""},
		{"all interfaces", Listener{Name: "gRPC", Addr: ":8081", Risk: "spend any client's limits"}, "level=WARN msg=\"the gRPC listener is not on loopback and has no TLS: anyone who can reach it can spend any client's limits\""},
		{"an address", Listener{Name: "HTTP", Addr: "10.0.0.5:8082"}, "level=WARN"},
		{"with TLS", Listener{Name: "HTTP", Addr: "0.0.0.0:8082", TLS: tlsR}, ""},
		{"with its own TLS", Listener{Name: "gRPC", Addr: "0.0.0.0:8081", OwnTLS: true}, ""},
		{"admin with token", Listener{Name: "admin", Addr: ":9090", Credentials: true, Auth: true}, ""},
		{"admin without token", Listener{Name: "admin", Addr: ":9090", Credentials: true}, "has no TLS and authenticates no client"},
		{"admin with TLS only", Listener{Name: "admin", Addr: ":9090", Credentials: true, TLS: tlsR}, "authenticates no client (TLS alone lets anyone in)"},
		{"gRPC with TLS, no client CA", Listener{Name: "gRPC", Addr: ":8081", Credentials: true, OwnTLS: true}, "level=WARN"},
		{"gRPC with mTLS", Listener{Name: "gRPC", Addr: ":8081", Credentials: true, Auth: true, OwnTLS: true}, ""},
		{"unix socket", Listener{Name: "gRPC", Addr: "unix:/run/portero/rls.sock"}, ""},
		{"public gateway", Listener{Name: "gateway", Addr: ":8080", Public: true}, "level=INFO"},
		{"public gateway with TLS", Listener{Name: "gateway", Addr: ":8443", Public: true, TLS: tlsR}, ""},
	} {
		var b bytes.Buffer
		warnExposed(slog.New(slog.NewTextHandler(&b, nil)), tt.l)
		got := b.String()
		if tt.want == "" && got != "" || tt.want != "" && (!strings.Contains(got, tt.want) || !strings.Contains(got, tt.l.Addr)) {
			t.Errorf("%s: warnExposed(%s) logged %q, want %q", tt.name, tt.l.Addr, got, tt.want)
		}
	}
}

// fakeServer is a Server that blocks in Serve until Shutdown, and whose
// Shutdown can be made to outlive its context.
type fakeServer struct {
	stop     chan struct{}
	once     sync.Once
	hang     bool
	closed   atomic.Bool
	shutdown atomic.Bool
}

func newFake() *fakeServer { return &fakeServer{stop: make(chan struct{})} }

func (f *fakeServer) Serve(ln net.Listener) error {
	<-f.stop
	ln.Close()
	return http.ErrServerClosed
}

func (f *fakeServer) Shutdown(ctx context.Context) error {
	f.shutdown.Store(true)
	if f.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	f.once.Do(func() { close(f.stop) })
	return nil
}

func (f *fakeServer) Close() error {
	f.closed.Store(true)
	f.once.Do(func() { close(f.stop) })
	return nil
}

// TestServiceRun: Run prints one line per listener, reloads on the signal
// channel and on a change of the watched file, calls OnDrain, shuts every
// server down, and returns nil; a server that outlives the shutdown
// timeout is closed and Run says ErrInterrupted.
func TestServiceRun(t *testing.T) {
	for _, hang := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "c.yaml")
		os.WriteFile(path, []byte("v1"), 0o644)
		out := &testenv.Buffer{}
		reload := make(chan struct{})
		svc := Start(Options{Name: "test", Stdout: out, Logger: slog.New(slog.DiscardHandler), Watch: path,
			WatchOptions: watch.Options{Poll: 10 * time.Millisecond, Settle: 10 * time.Millisecond}, Reload: reload})
		a, b := newFake(), newFake()
		b.hang = hang
		drained := make(chan string, 2)
		if _, err := svc.Listen(Listener{Name: "one", Addr: "127.0.0.1:0", Server: a, OnDrain: func() { drained <- "one" }}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Listen(Listener{Name: "two", Addr: "127.0.0.1:0", Scheme: "grpc", Note: "(lean)", Server: b}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		reasons := make(chan string, 4)
		done := make(chan error, 1)
		go func() {
			done <- svc.Run(ctx, Hooks{Reload: func(why string) { reasons <- why },
				ShutdownTimeout: func() time.Duration { return 50 * time.Millisecond }})
		}()
		reload <- struct{}{}
		if why := <-reasons; why != "signal" {
			t.Errorf("reload reason %q, want signal", why)
		}
		os.WriteFile(path, []byte("v2"), 0o644)
		select {
		case why := <-reasons:
			if why != "file change" {
				t.Errorf("reload reason %q, want file change", why)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no reload after the file changed")
		}
		cancel()
		err := <-done
		if hang != errors.Is(err, ErrInterrupted) || !hang && err != nil {
			t.Errorf("hang %v: Run = %v", hang, err)
		}
		if !a.shutdown.Load() || !b.shutdown.Load() || b.closed.Load() != hang {
			t.Errorf("hang %v: shut down %v %v, closed %v", hang, a.shutdown.Load(), b.shutdown.Load(), b.closed.Load())
		}
		if len(drained) != 1 {
			t.Errorf("OnDrain called %d times, want once", len(drained))
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "test: one listening on http://127.0.0.1:") ||
			!strings.HasPrefix(lines[1], "test: two listening on grpc://127.0.0.1:") || !strings.HasSuffix(lines[1], " (lean)") {
			t.Errorf("printed:\n%s", out)
		}
	}
}

// TestServiceListenerFails: a listener that stops serving by itself stops
// the service (no drain), and Run returns its error; Listen on a taken
// address fails, and Close releases what was bound.
func TestServiceListenerFails(t *testing.T) {
	svc := Start(Options{Logger: slog.New(slog.DiscardHandler)})
	addr, err := svc.Listen(Listener{Name: "one", Addr: "127.0.0.1:0", Server: &http.Server{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Listen(Listener{Name: "dup", Addr: addr.String(), Server: &http.Server{}}); err == nil || !strings.Contains(err.Error(), "dup listener") {
		t.Errorf("Listen on a taken address = %v", err)
	}
	svc.Close()
	if ln, err := net.Listen("tcp", addr.String()); err != nil {
		t.Errorf("the address is still held after Close: %v", err)
	} else {
		ln.Close()
	}
	if err := svc.Run(context.Background(), Hooks{}); err == nil {
		t.Error("Run after Close succeeded")
	}

	svc = Start(Options{Logger: slog.New(slog.DiscardHandler)})
	failing := &failServer{}
	if _, err := svc.Listen(Listener{Name: "flaky", Addr: "127.0.0.1:0", Server: failing}); err != nil {
		t.Fatal(err)
	}
	// A probe has asked, so a drain would wait its hour: after a failure
	// there is none.
	svc.Readiness().Ready()
	drain := time.Hour
	err = svc.Run(context.Background(), Hooks{DrainPeriod: func() time.Duration { return drain }})
	if err == nil || !strings.Contains(err.Error(), "flaky listener: accept failed") {
		t.Errorf("Run = %v, want the listener's error", err)
	}
}

type failServer struct{}

func (failServer) Serve(ln net.Listener) error    { ln.Close(); return errors.New("accept failed") }
func (failServer) Shutdown(context.Context) error { return nil }
