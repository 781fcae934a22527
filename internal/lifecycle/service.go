package lifecycle

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/portero-rl/portero/internal/tlsreload"
	"github.com/portero-rl/portero/internal/watch"
)

// Server is what a listener serves: an *http.Server, the RLS's gRPC
// servers. Shutdown stops accepting and waits for what is in flight until
// its context ends.
type Server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

// Listener is one address a Service serves.
type Listener struct {
	// Name says what it is in logs and in the printed line ("gateway",
	// "admin"); Addr is the host:port to bind.
	Name, Addr string
	// Scheme is the printed URL's scheme ("http", "grpc"; with TLS an "s"
	// is added), Note what is printed after it.
	Scheme, Note string
	Server       Server
	// TLS, when not nil, serves TLS from its files (reloaded when they
	// change), offering NextProtos in ALPN (nil: h2 and http/1.1).
	TLS        *tlsreload.Reloader
	NextProtos []string
	// OwnTLS reports that Server does TLS itself (grpc-go with transport
	// credentials): it counts as TLS for the warning and the printed URL.
	OwnTLS bool
	// Credentials marks a listener that can ask for credentials (a bearer
	// token, a client certificate), Auth one that does. Off loopback, such
	// a listener without one draws a warning, TLS or not (TLS alone lets
	// anyone in); any other listener draws one without TLS. Risk says what
	// anyone could then do ("spend any client's limits").
	Credentials, Auth bool
	Risk              string
	// Public marks a listener meant to face any client (the gateway): off
	// loopback without TLS it is logged at INFO only, since TLS is often
	// terminated in front of it.
	Public bool
	// OnDrain, when set, is called as the drain starts (a gRPC server
	// turns its health NOT_SERVING).
	OnDrain func()
	// Listen binds Addr; nil means TCP (a unix socket needs its own).
	Listen func(addr string) (net.Listener, error)
}

// Options configure a Service. Every field may be left zero.
type Options struct {
	// Name prefixes the printed lines ("portero", "portero rls"); Stdout
	// receives one line per listener, "NAME: LISTENER listening on URL"
	// (nil: io.Discard); Logger the logs (nil: slog.Default()).
	Name   string
	Stdout io.Writer
	Logger *slog.Logger
	// Watch is the configuration file or directory to watch for changes
	// (package watch); empty for none. The watcher starts in Start, so
	// that a change made while the command reads its configuration is a
	// reload rather than lost.
	Watch        string
	WatchOptions watch.Options
	// Reload triggers a reload for every value received (SIGHUP).
	Reload <-chan struct{}
	// Hurry, when it receives or is closed, ends the drain early (the
	// second SIGTERM).
	Hurry <-chan struct{}
}

// Hooks are what Run asks of the command while it serves.
type Hooks struct {
	// Reload reads the configuration again and applies it (or logs why
	// not), one at a time; why is "signal", "file change" or the reason
	// given to Watch. Nil: reload triggers are ignored.
	Reload func(why string)
	// DrainPeriod and ShutdownTimeout are asked at stop time, so that a
	// reload may change them; nil means 0 and 30s.
	DrainPeriod, ShutdownTimeout func() time.Duration
	// Serving, when set, is called once every listener serves, after
	// their lines are printed.
	Serving func()
}

// DefaultShutdownTimeout is the shutdown timeout when Hooks.ShutdownTimeout
// is nil.
const DefaultShutdownTimeout = 30 * time.Second

// Service is one command's serving lifecycle: its listeners (TLS
// optional, certificates reloaded), readiness, reloads on a signal and on
// file change, then on stop the drain and the graceful shutdown. In this
// order:
//
//	svc := Start(opts)       // the watcher's baseline
//	defer svc.Close()
//	... read the configuration, build the servers ...
//	svc.Listen(l)            // once per listener: binds, may fail
//	err := svc.Run(ctx, hooks)
type Service struct {
	opts  Options
	log   *slog.Logger
	ready Readiness

	changes  <-chan struct{} // the configuration's
	triggers chan string     // the other files' changes, by reason
	watchers []*watch.Watcher
	forwards sync.WaitGroup
	stopOnce sync.Once

	mu        sync.Mutex
	listeners []bound
	closed    bool // no more Listen or Run
	ran       bool // Run took the listeners: their servers close them
}

type bound struct {
	Listener
	ln  net.Listener
	url string
}

// Start begins a service: the configuration watcher, when asked for, runs
// from now on.
func Start(o Options) *Service {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Name == "" {
		o.Name = "portero"
	}
	s := &Service{opts: o, log: o.Logger, triggers: make(chan string, 1)}
	if o.Watch != "" {
		if w := s.watch(o.Watch, "the configuration"); w != nil {
			s.log.Info("watching the configuration: a change applies once it has settled", "path", o.Watch, "settle", w.Settle())
			s.changes = w.C
		}
	}
	return s
}

// watch starts a watcher of path (what names it in the log); nil, logged,
// when it cannot.
func (s *Service) watch(path, what string) *watch.Watcher {
	wo := s.opts.WatchOptions
	if wo.Logger == nil {
		wo.Logger = s.log
	}
	w, err := watch.New(path, wo)
	if err != nil {
		s.log.Warn("cannot watch "+what+"; reload with SIGHUP", "path", path, "err", err)
		return nil
	}
	s.mu.Lock()
	s.watchers = append(s.watchers, w)
	s.mu.Unlock()
	return w
}

// Watch reloads, giving why as the reason, when the file at path (one the
// configuration names, such as the API keys file) changes; what names the
// file in the log should it not be watched.
func (s *Service) Watch(path, what, why string) {
	w := s.watch(path, what)
	if w == nil {
		return
	}
	s.forwards.Go(func() {
		for range w.C {
			select {
			case s.triggers <- why:
			default: // one is pending already
			}
		}
	})
}

// stopWatch closes the watchers and waits for their forwarding.
func (s *Service) stopWatch() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		ws := s.watchers
		s.mu.Unlock()
		for _, w := range ws {
			w.Close()
		}
		s.forwards.Wait()
	})
}

// Readiness is what the service's /readyz answers; add the command's own
// checks to it.
func (s *Service) Readiness() *Readiness { return &s.ready }

// Listen binds l and returns the address bound (port 0 picks one). A
// listener bound off loopback without TLS, or without a token where it
// takes one, is logged as a warning.
func (s *Service) Listen(l Listener) (net.Addr, error) {
	listen := l.Listen
	if listen == nil {
		listen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	ln, err := listen(l.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", l.Name, err)
	}
	warnExposed(s.log, l)
	scheme := l.Scheme
	if scheme == "" {
		scheme = "http"
	}
	if l.TLS != nil {
		protos := l.NextProtos
		if protos == nil {
			protos = []string{"h2", "http/1.1"}
		}
		ln = tls.NewListener(ln, l.TLS.ServerConfig(protos...))
	}
	if l.TLS != nil || l.OwnTLS {
		scheme += "s"
	}
	host := ln.Addr().String()
	if ln.Addr().Network() == "unix" {
		host = "unix://" + host // as `portero check --server grpc://unix:///path` takes it
	}
	b := bound{Listener: l, ln: ln, url: scheme + "://" + host}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		ln.Close()
		return nil, errors.New("lifecycle: Listen after Close")
	}
	s.listeners = append(s.listeners, b)
	return ln.Addr(), nil
}

// URL returns the printed URL of the listener named name ("" when none).
func (s *Service) URL(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.listeners {
		if b.Name == name {
			return b.url
		}
	}
	return ""
}

// warnExposed logs a warning when l binds more than loopback unprotected:
// without a credential where it takes one, without TLS otherwise.
func warnExposed(log *slog.Logger, l Listener) {
	if Loopback(l.Addr) || strings.HasPrefix(l.Addr, "unix:") {
		return // a unix socket is as private as its file's permissions
	}
	if l.Public {
		if l.TLS == nil && !l.OwnTLS {
			log.Info("the "+l.Name+" listener serves plain HTTP off loopback: terminate TLS in front of it or configure its TLS", "addr", l.Addr)
		}
		return
	}
	encrypted := l.TLS != nil || l.OwnTLS
	if l.Credentials && l.Auth || !l.Credentials && encrypted {
		return
	}
	var msg string
	switch {
	case !l.Credentials:
		msg = "the " + l.Name + " listener is not on loopback and has no TLS"
	case encrypted:
		msg = "the " + l.Name + " listener is not on loopback and authenticates no client (TLS alone lets anyone in)"
	default:
		msg = "the " + l.Name + " listener is not on loopback, has no TLS and authenticates no client"
	}
	if l.Risk != "" {
		msg += ": anyone who can reach it can " + l.Risk
	}
	log.Warn(msg, "addr", l.Addr)
}

// Close stops the watcher and closes the listeners if Run did not serve
// them (an error between Listen and Run). It may be called more than once,
// and after Run.
func (s *Service) Close() {
	s.stopWatch()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ran {
		return
	}
	for _, b := range s.listeners {
		b.ln.Close()
	}
	s.listeners = nil
}

// Run prints the listeners' URLs and serves them until ctx is done (or one
// of them fails), applying reloads meanwhile; then it drains (none after a
// failure) and shuts every server down at once within the shutdown
// timeout. It returns after every server has stopped: nil, the error that
// stopped a listener, or one wrapping ErrInterrupted when the timeout cut
// requests in flight.
func (s *Service) Run(ctx context.Context, h Hooks) error {
	s.mu.Lock()
	ls := s.listeners
	if s.closed {
		s.mu.Unlock()
		return errors.New("lifecycle: Run after Close")
	}
	s.closed, s.ran = true, true
	s.mu.Unlock()
	defer s.stopWatch()
	if len(ls) == 0 {
		return errors.New("lifecycle: nothing to serve")
	}
	for _, b := range ls {
		line := fmt.Sprintf("%s: %s listening on %s", s.opts.Name, b.Name, b.url)
		if b.Note != "" {
			line += " " + b.Note
		}
		fmt.Fprintln(s.opts.Stdout, line)
	}

	var (
		wg       sync.WaitGroup
		stopping = make(chan struct{})
		errc     = make(chan error, len(ls))
	)
	for _, b := range ls {
		wg.Go(func() {
			err := b.Server.Serve(b.ln)
			select {
			case <-stopping: // whatever Serve says once we stop it
			default:
				if err == nil || errors.Is(err, http.ErrServerClosed) {
					err = errors.New("stopped serving")
				}
				errc <- fmt.Errorf("%s listener: %w", b.Name, err)
			}
		})
	}
	s.ready.Serving()
	if h.Serving != nil {
		h.Serving()
	}

	reload, apply := s.opts.Reload, h.Reload
	if apply == nil {
		apply = func(string) {}
	}
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case runErr = <-errc:
			break loop
		case _, ok := <-reload:
			if !ok {
				reload = nil
				continue
			}
			apply("signal")
		case _, ok := <-s.changes:
			if !ok {
				s.changes = nil
				continue
			}
			apply("file change")
		case why := <-s.triggers:
			apply(why)
		}
	}
	s.stopWatch()

	// The drain: /readyz says 503 (and gRPC health NOT_SERVING) while the
	// listeners still serve, so that load balancers stop sending first.
	for _, b := range ls {
		if b.OnDrain != nil {
			b.OnDrain()
		}
	}
	if runErr == nil && h.DrainPeriod != nil {
		s.ready.Drain(h.DrainPeriod(), s.opts.Hurry, s.log)
	} else {
		s.ready.Drain(0, nil, nil)
	}
	timeout := DefaultShutdownTimeout
	if h.ShutdownTimeout != nil {
		timeout = h.ShutdownTimeout()
	}
	s.log.Info("shutting down; letting in-flight requests finish", "timeout", timeout)
	close(stopping)
	servers := make([]Server, len(ls))
	for i, b := range ls {
		servers[i] = b.Server
	}
	if err := Shutdown(timeout, servers...); err != nil {
		s.log.Error("shutdown", "err", err)
		if runErr == nil {
			runErr = err
		}
	}
	wg.Wait()
	return runErr
}
