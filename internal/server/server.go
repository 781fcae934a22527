// Package server runs `portero serve`: the gateway listener, the admin
// listener (Prometheus metrics, effective config, refused keys, a live
// view), configuration reloads on SIGHUP and on file change, and graceful
// shutdown. Run owns every goroutine it starts and returns only after they
// have stopped.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

// Options configure Run. The zero value serves the embedded default
// configuration.
type Options struct {
	// ConfigPath is the YAML file; empty means the embedded default.
	ConfigPath string
	// Listen and AdminListen override the configuration's addresses when
	// not empty (use 127.0.0.1:0 in tests); AdminListen "off" disables the
	// admin listener.
	Listen, AdminListen string
	// Stdout receives the addresses listened on, one line each; nil means
	// io.Discard.
	Stdout io.Writer
	// Logger receives the logs; nil means text logs to os.Stderr.
	Logger *slog.Logger
	// Reload, when not nil, triggers a reload for every value received
	// (serve sends one per SIGHUP).
	Reload <-chan struct{}
	// Watch reloads when the configuration file changes.
	Watch bool
	// Now is the clock of the limiter; nil means time.Now.
	Now func() time.Time
	// OpenStore opens a store for a configuration; nil means the built-in
	// stores (memory; redis when it is built in).
	OpenStore func(cfg *config.Config) (portero.Store, error)
}

// Server is one running `portero serve`.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	obs     *observer
	gw      *gateway.Gateway
	now     func() time.Time

	mu       sync.Mutex // guards store, storeKey and serializes reloads
	store    portero.Store
	redis    atomic.Pointer[redisstore.Store] // store, when it is a Redis store: read per request without mu
	storeKey storeSettings
	retired  []portero.Store // replaced by a reload; closed when Run returns
}

// OpenStore opens the store a configuration names: memory (store/memstore)
// or redis (store/redisstore, with on_error mapped to its failure policy:
// allow → fail-open, deny → fail-closed, local → local).
func OpenStore(cfg *config.Config) (portero.Store, error) {
	switch cfg.StoreType {
	case "memory":
		return memstore.New(memstore.Config{MaxKeys: cfg.MaxKeys})
	case "redis":
		pol := redisstore.FailOpen
		switch cfg.OnError {
		case "deny":
			pol = redisstore.FailClosed
		case "local":
			pol = redisstore.FailLocal
		}
		return redisstore.New(redisstore.Config{URL: cfg.StoreURL, Policy: pol, LocalShare: cfg.LocalShare, Timeout: cfg.StoreTimeout})
	}
	return nil, fmt.Errorf("store type %q: unknown", cfg.StoreType)
}

// storeSettings are the settings OpenStore builds a store from. A reload
// opens a new store when they change and keeps the running one, with its
// counters, otherwise. The Redis store applies on_error, local_share and
// timeout itself, so for it they are part of the key; a memory store leaves
// on_error to the middleware, so changing it keeps the store.
type storeSettings struct {
	typ, url   string
	maxKeys    int
	onError    string
	localShare float64
	timeout    time.Duration
}

func storeKey(cfg *config.Config) storeSettings {
	k := storeSettings{typ: cfg.StoreType, url: cfg.StoreURL, maxKeys: cfg.MaxKeys}
	if cfg.StoreType != "memory" {
		k.onError, k.localShare, k.timeout = cfg.OnError, cfg.LocalShare, cfg.StoreTimeout
	}
	return k
}

func (s *Server) load() (*config.Config, error) {
	if s.opts.ConfigPath == "" {
		return config.LoadDefault()
	}
	return config.Load(s.opts.ConfigPath)
}

func (s *Server) currentStore() portero.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store
}

// degraded reports whether the store is answering from its failure policy
// (the Redis store's fallback).
func (s *Server) degraded() bool {
	if rs := s.redis.Load(); rs != nil {
		return rs.Degraded()
	}
	return false
}

// setStore makes st the current store; s.mu is held or no request runs yet.
func (s *Server) setStore(st portero.Store, key storeSettings) {
	s.store, s.storeKey = st, key
	rs, _ := st.(*redisstore.Store)
	s.redis.Store(rs)
}

func (s *Server) adminToken() string { return s.gw.Config().AdminToken }

// Run loads the configuration, listens, prints the addresses to
// opts.Stdout and serves until ctx is done; then it stops accepting,
// lets in-flight requests finish (up to the configured shutdown_timeout),
// closes the store and returns. A bad configuration is an error before
// anything listens.
func Run(ctx context.Context, opts Options) error {
	s := &Server{opts: opts, log: opts.Logger, now: opts.Now, metrics: newMetrics()}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if s.now == nil {
		s.now = time.Now
	}
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.OpenStore == nil {
		s.opts.OpenStore = OpenStore
	}
	s.obs = &observer{m: s.metrics, log: s.log, refused: &refusals{}, now: s.now, degraded: s.degraded}

	cfg, err := s.load()
	if err != nil {
		return err
	}
	store, err := s.opts.OpenStore(cfg)
	if err != nil {
		return err
	}
	s.setStore(store, storeKey(cfg))
	defer func() {
		s.mu.Lock()
		stores := append(s.retired, s.store)
		s.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, st := range stores {
			if err := st.Close(cctx); err != nil {
				s.log.Warn("closing the store", "err", err)
			}
		}
	}()
	s.gw, err = gateway.New(cfg, store, gateway.Hooks{
		OnDecision:   s.obs.onDecision,
		OnError:      s.obs.onError,
		OnProxyError: s.obs.onProxyError,
		Now:          opts.Now,
	})
	if err != nil {
		return err
	}
	s.obs.setPolicy(cfg.Policy)
	s.metrics.configRules.Set(float64(len(cfg.Policy.Rules())))

	listen := cfg.Listen
	if opts.Listen != "" {
		listen = opts.Listen
	}
	adminListen := cfg.AdminListen
	if opts.AdminListen == "off" {
		adminListen = ""
	} else if opts.AdminListen != "" {
		adminListen = opts.AdminListen
	}

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("gateway listener: %w", err)
	}
	gwSrv := &http.Server{
		Handler:           s.gw,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	var adminSrv *http.Server
	var adminLn net.Listener
	if adminListen != "" {
		if adminLn, err = net.Listen("tcp", adminListen); err != nil {
			ln.Close()
			return fmt.Errorf("admin listener: %w", err)
		}
		if host, _, _ := net.SplitHostPort(adminListen); !isLoopback(host) && cfg.AdminToken == "" {
			s.log.Warn("the admin listener is not on loopback and has no token", "addr", adminListen)
		}
		adminSrv = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	}

	gwURL := "http://" + ln.Addr().String()
	fmt.Fprintf(opts.Stdout, "portero: gateway listening on %s\n", gwURL)
	if adminLn != nil {
		fmt.Fprintf(opts.Stdout, "portero: admin listening on http://%s (live view /, /metrics, /config, /api/refused)\n", adminLn.Addr())
	}
	fmt.Fprintf(opts.Stdout, "portero: config %s: %d rules, %d routes, %s store\n", cfg.Source, len(cfg.Policy.Rules()), len(cfg.Routes), cfg.StoreType)
	fmt.Fprintf(opts.Stdout, "portero: try: for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code}\\n' %s/; done\n", gwURL)

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := gwSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("gateway: %w", err)
		}
	}()
	if adminSrv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := adminSrv.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("admin: %w", err)
			}
		}()
	}
	s.gw.SetReady(true)

	// Reloads: on the Reload channel and on file changes.
	rctx, stopReloads := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.reloadLoop(rctx)
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	stopReloads()
	s.gw.SetReady(false)
	s.log.Info("shutting down; letting in-flight requests finish", "timeout", s.gw.Config().ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.gw.Config().ShutdownTimeout)
	defer cancel()
	if err := gwSrv.Shutdown(sctx); err != nil {
		s.log.Warn("gateway shutdown", "err", err)
		gwSrv.Close()
	}
	if adminSrv != nil {
		if err := adminSrv.Shutdown(sctx); err != nil {
			adminSrv.Close()
		}
	}
	wg.Wait()
	return runErr
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// reloadLoop waits for reload triggers until ctx is done.
func (s *Server) reloadLoop(ctx context.Context) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if s.opts.Watch && s.opts.ConfigPath != "" {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			s.log.Warn("cannot watch the configuration file; reload with SIGHUP", "err", err)
		} else {
			defer w.Close()
			// Watch the directory: editors and Kubernetes replace files by
			// renaming, which a watch on the file itself would lose.
			if err := w.Add(filepath.Dir(s.opts.ConfigPath)); err != nil {
				s.log.Warn("cannot watch the configuration file; reload with SIGHUP", "err", err)
			}
			events, errs = w.Events, w.Errors
		}
	}
	target := filepath.Clean(s.opts.ConfigPath)
	// Debounce: editors write a file in several steps.
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case _, ok := <-s.opts.Reload:
			if !ok {
				s.opts.Reload = nil
				continue
			}
			s.Reload("signal")
		case ev := <-events:
			if filepath.Clean(ev.Name) != target || ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) == 0 {
				continue
			}
			if timer == nil {
				timer = time.NewTimer(100 * time.Millisecond)
			} else {
				timer.Reset(100 * time.Millisecond)
			}
			fire = timer.C
		case <-fire:
			fire = nil
			s.Reload("file change")
		case err := <-errs:
			s.log.Warn("watching the configuration file", "err", err)
		}
	}
}

// Reload reads the configuration again and applies it whole, or, when the
// new file is bad, logs every error and keeps the running configuration.
// Rules left unchanged keep their counters (the store is kept unless the
// store section changed). Listener addresses and the admin listener are not
// changed by a reload; a restart is needed for those.
func (s *Server) Reload(why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg, err := s.load()
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		var es config.Errors
		if errors.As(err, &es) {
			for _, e := range es {
				s.log.Error("configuration refused; keeping the running one", "reason", why, "error", e.Error())
			}
		} else {
			s.log.Error("configuration refused; keeping the running one", "reason", why, "error", err)
		}
		return err
	}
	old := s.gw.Config()
	store, key := s.store, storeKey(cfg)
	if key != s.storeKey {
		if store, err = s.opts.OpenStore(cfg); err != nil {
			s.metrics.reloads.WithLabelValues("error").Inc()
			s.log.Error("configuration refused: cannot open its store; keeping the running one", "reason", why, "error", err)
			return err
		}
	}
	if err := s.gw.Update(cfg, store); err != nil {
		if store != s.store {
			_ = store.Close(context.Background())
		}
		s.metrics.reloads.WithLabelValues("error").Inc()
		s.log.Error("configuration refused; keeping the running one", "reason", why, "error", err)
		return err
	}
	if store != s.store {
		s.log.Info("store changed: counters start afresh", "type", cfg.StoreType)
		// Requests still using the old store finish with it; it is closed
		// when Run returns.
		s.retired = append(s.retired, s.store)
		s.setStore(store, key)
	}
	s.obs.setPolicy(cfg.Policy)
	if cfg.Listen != old.Listen || cfg.AdminListen != old.AdminListen {
		s.log.Warn("listener addresses changed in the file; they apply at the next restart")
	}
	s.metrics.reloads.WithLabelValues("ok").Inc()
	s.metrics.configRules.Set(float64(len(cfg.Policy.Rules())))
	s.log.Info("configuration reloaded", "reason", why, "source", cfg.Source, "rules", len(cfg.Policy.Rules()))
	return nil
}
