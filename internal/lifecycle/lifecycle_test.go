package lifecycle

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestReadiness(t *testing.T) {
	var r Readiness
	if err := r.Ready(); err == nil || err.Error() != "starting" {
		t.Errorf("Ready() before Serving = %v, want starting", err)
	}
	r.Serving()
	if err := r.Ready(); err != nil {
		t.Errorf("Ready() serving = %v", err)
	}
	down := errors.New("the store is down")
	var fail bool
	r.AddCheck(func() error {
		if fail {
			return down
		}
		return nil
	})
	fail = true
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 503 || rec.Body.String() != "not ready: the store is down\n" {
		t.Errorf("probe with a failing check = %d %q", rec.Code, rec.Body)
	}
	fail = false
	rec = httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 || rec.Body.String() != "ready\n" {
		t.Errorf("probe when ready = %d %q", rec.Code, rec.Body)
	}
	r.Drain(0, nil, nil)
	r.Serving() // no way back from draining
	if err := r.Ready(); err == nil || err.Error() != "shutting down" {
		t.Errorf("Ready() after Drain = %v, want shutting down", err)
	}
}

// TestDrain: not ready at once, for exactly the period on synctest's
// clock, or until hurry; no wait at all when no probe ever asked.
func TestDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r Readiness
		r.Serving()
		r.Ready() // a probe asked: someone watches
		start := time.Now()
		done := make(chan struct{})
		go func() { r.Drain(5*time.Second, nil, nil); close(done) }()
		synctest.Wait()
		if r.Ready() == nil {
			t.Error("ready while draining")
		}
		<-done
		if took := time.Since(start); took != 5*time.Second {
			t.Errorf("Drain(5s) took %v", took)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		var r Readiness
		r.Ready()
		hurry := make(chan struct{})
		start := time.Now()
		go func() { time.Sleep(time.Second); close(hurry) }()
		r.Drain(time.Minute, hurry, nil)
		if took := time.Since(start); took != time.Second {
			t.Errorf("Drain cut by hurry after 1s took %v", took)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		var r Readiness
		r.Serving()
		start := time.Now()
		r.Drain(time.Minute, nil, nil)
		if took := time.Since(start); took != 0 {
			t.Errorf("Drain with no probe ever took %v, want no wait", took)
		}
		if r.Ready() == nil {
			t.Error("ready after Drain")
		}
	})
}

// TestShutdown: a server whose request ends once the shutdown has begun
// shuts down cleanly within the timeout; one whose request outlives the
// timeout is cut, and says so. Neither depends on the machine's speed: the
// first request ends when the server's shutdown starts (a minute is only
// the bound of a broken test), the second never before the end.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		cut     bool
	}{
		{"in time", time.Minute, false},
		{"cut", 100 * time.Millisecond, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			entered, shutdown := make(chan struct{}), make(chan struct{})
			s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				if tt.cut {
					<-release
				} else {
					<-shutdown
				}
				io.WriteString(w, "done")
			})}
			s.RegisterOnShutdown(func() { close(shutdown) })
			go s.Serve(ln)
			go http.Get("http://" + ln.Addr().String())
			<-entered
			err = Shutdown(tt.timeout, s, nil)
			if got := errors.Is(err, ErrInterrupted); got != tt.cut {
				t.Errorf("Shutdown = %v, want cut %v", err, tt.cut)
			}
		})
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:8081": true, "[::1]:8082": true, "127.1.2.3:1": true,
		":8080": false, "0.0.0.0:8081": false, "[::]:8082": false, "10.0.0.1:80": false, "example.com:80": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestSignals: SIGHUP asks for a reload (several pending are one), SIGUSR1
// to reopen the logs, and the second stop signal closes Hurry.
func TestSignals(t *testing.T) {
	s, stop := NotifySignals()
	defer stop()
	self, _ := os.FindProcess(os.Getpid())
	self.Signal(syscall.SIGHUP)
	select {
	case <-s.Reload:
	case <-time.After(5 * time.Second):
		t.Fatal("no reload after SIGHUP")
	}
	self.Signal(syscall.SIGUSR1)
	select {
	case <-s.Reopen:
	case <-time.After(5 * time.Second):
		t.Fatal("no reopen after SIGUSR1")
	}
	self.Signal(syscall.SIGTERM)
	select {
	case <-s.Hurry:
		t.Fatal("Hurry closed at the first SIGTERM")
	case <-time.After(100 * time.Millisecond):
	}
	self.Signal(syscall.SIGTERM)
	select {
	case <-s.Hurry:
	case <-time.After(5 * time.Second):
		t.Fatal("Hurry not closed at the second SIGTERM")
	}
}
