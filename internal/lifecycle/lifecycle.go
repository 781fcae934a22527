// Package lifecycle is the one serving lifecycle of `portero serve` and
// `portero rls` (Service): listeners, readiness (what /readyz answers),
// reloads, the drain before the listeners close, the graceful shutdown
// with its deadline, and the signals that drive them.
//
// On SIGTERM, Readiness.Drain marks the server not ready and keeps serving
// for the drain period, so that load balancers probing /readyz see 503 and
// stop sending; then Shutdown stops accepting, gives in-flight requests
// the shutdown timeout and reports ErrInterrupted when it had to cut some.
// A second SIGTERM or Ctrl-C ends the drain at once.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// state of a Readiness.
const (
	starting int32 = iota
	serving
	draining
)

// Readiness is what a readiness probe answers: not ready while starting,
// ready from Serving on while every check passes, not ready from Drain on.
// Its methods are safe for concurrent use; a check runs at every probe,
// so it must be quick.
type Readiness struct {
	state  atomic.Int32
	probed atomic.Bool // Ready was asked since Serving
	mu     sync.Mutex
	checks []func() error
}

// AddCheck adds a condition of readiness: while check returns an error
// the probe answers 503 with the error's text.
func (r *Readiness) AddCheck(check func() error) {
	r.mu.Lock()
	r.checks = append(r.checks, check)
	r.mu.Unlock()
}

// Serving marks the listeners up.
func (r *Readiness) Serving() { r.state.CompareAndSwap(starting, serving) }

// Ready returns nil when ready, or why not, and notes that a probe asked
// (see Drain).
func (r *Readiness) Ready() error {
	r.probed.Store(true)
	switch r.state.Load() {
	case starting:
		return errors.New("starting")
	case draining:
		return errors.New("shutting down")
	}
	r.mu.Lock()
	checks := r.checks
	r.mu.Unlock()
	for _, c := range checks {
		if err := c(); err != nil {
			return err
		}
	}
	return nil
}

// ServeHTTP answers a readiness probe: 200 "ready", or 503 "not ready:
// WHY".
func (r *Readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := r.Ready(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Drain marks the server not ready and waits for period while it keeps
// serving, or less if hurry receives or is closed. It returns at once when
// no probe has asked Ready since the start: then nothing watches readiness
// (a developer's Ctrl-C, a test), and waiting would only delay the stop.
func (r *Readiness) Drain(period time.Duration, hurry <-chan struct{}, log *slog.Logger) {
	r.state.Store(draining)
	if period <= 0 {
		return
	}
	if !r.probed.Load() {
		if log != nil {
			log.Info("no readiness probe has asked since the start: stopping without the drain", "drain_period", period)
		}
		return
	}
	if log != nil {
		log.Info("draining: /readyz answers 503 while requests are still served; a second SIGTERM or Ctrl-C skips the wait", "drain_period", period)
	}
	t := time.NewTimer(period)
	defer t.Stop()
	select {
	case <-t.C:
	case <-hurry:
		if log != nil {
			log.Info("drain cut short by a second signal")
		}
	}
}

// ErrInterrupted reports that the shutdown timeout passed with requests
// still in flight, whose connections were then closed.
var ErrInterrupted = errors.New("shutdown timeout: in-flight requests were cut")

// Shutdown stops the servers gracefully, all at once: they stop accepting
// and have timeout for their in-flight requests, after which those with a
// Close method (an *http.Server) are closed and the error wraps
// ErrInterrupted. Nil servers are skipped.
func Shutdown(timeout time.Duration, servers ...Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	var cut atomic.Bool
	for _, s := range servers {
		if s == nil {
			continue
		}
		if hs, ok := s.(*http.Server); ok && hs == nil {
			continue
		}
		wg.Go(func() {
			if err := s.Shutdown(ctx); err != nil {
				cut.Store(true)
				switch c := s.(type) {
				case interface{ Close() error }:
					c.Close()
				case interface{ Close() }:
					c.Close()
				}
			}
		})
	}
	wg.Wait()
	if cut.Load() {
		return fmt.Errorf("%w (after %v)", ErrInterrupted, timeout)
	}
	return nil
}

// Signals are the signals a serving command acts on: a value on Reload
// after SIGHUP and on Reopen after SIGUSR1 (several pending are one), and
// Hurry closed at the second SIGTERM or interrupt (the first cancels the
// command's context, in main).
type Signals struct {
	Reload, Hurry, Reopen <-chan struct{}
}

// NotifySignals starts delivering Signals; stop ends it and its goroutine.
func NotifySignals() (s Signals, stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGTERM, os.Interrupt)
	reload, reopen, hurry, done := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		stops := 0
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				if sig == syscall.SIGHUP || sig == syscall.SIGUSR1 {
					c := reload
					if sig == syscall.SIGUSR1 {
						c = reopen
					}
					select {
					case c <- struct{}{}:
					default:
					}
					continue
				}
				if stops++; stops == 2 {
					close(hurry)
				}
			}
		}
	})
	return Signals{Reload: reload, Hurry: hurry, Reopen: reopen}, func() {
		signal.Stop(ch)
		close(done)
		wg.Wait()
	}
}

// Loopback reports whether a listen address (host:port) binds loopback
// only: localhost or a loopback IP. ":8080" and "0.0.0.0:8080" bind every
// interface and are not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
