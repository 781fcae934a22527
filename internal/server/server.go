// Package server runs `portero serve`: the gateway listener, the admin
// listener (Prometheus metrics, effective config, refused keys, a live
// view), configuration reloads on SIGHUP and on file change, and graceful
// shutdown (a drain with /readyz at 503, then in-flight requests get the
// shutdown timeout). Run owns every goroutine it starts and returns only
// after they have stopped.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/accesslog"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/internal/lifecycle"
	"github.com/portero-rl/portero/internal/logging"
	"github.com/portero-rl/portero/internal/watch"
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
	// Logger receives the logs; nil means slog.Default().
	Logger *slog.Logger
	// Reload, when not nil, triggers a reload for every value received
	// (serve sends one per SIGHUP).
	Reload <-chan struct{}
	// DrainPeriod, when not nil, overrides server.drain_period.
	DrainPeriod *time.Duration
	// Hurry, when it receives or is closed, ends the drain at shutdown
	// early (serve closes it at a second SIGTERM or Ctrl-C).
	Hurry <-chan struct{}
	// Watch reloads when the configuration file changes (package watch).
	Watch bool
	// WatchOptions tune the watcher; the zero value is its defaults.
	WatchOptions watch.Options
	// LogSampler bounds the refusal and shadow-refusal lines per rule;
	// nil means logging.DefaultPerSecond a second.
	LogSampler *logging.Sampler
	// Now is the clock of the limiter; nil means time.Now.
	Now func() time.Time
	// AccessLog is the access log; the zero value is none.
	AccessLog AccessLog
	// Reopen, when not nil, reopens the access log for every value
	// received (serve sends one per SIGUSR1, for log rotation).
	Reopen <-chan struct{}
	// OpenStore opens a store for a configuration, logging to log; nil
	// means OpenStore.
	OpenStore func(cfg *config.Config, log *slog.Logger) (portero.Store, error)
}

// Server is one running `portero serve`.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	obs     *observer
	gw      *gateway.Gateway
	now     func() time.Time

	ready *lifecycle.Readiness

	dash     *dashboard.Dashboard // nil without an admin listener
	loadedAt atomic.Int64         // unix ns when the running configuration was applied

	access  *accesslog.Writer         // nil when off
	logSpec atomic.Pointer[logSpec]   // what the access log records of a request
	addrs   atomic.Pointer[[2]string] // the gateway's and admin's bound addresses, for /config

	mu       sync.Mutex // guards store, storeKey and serializes reloads
	store    *leased
	redis    atomic.Pointer[redisstore.Store] // store, when it is a Redis store: read per request without mu
	storeKey storeSettings
	closers  sync.WaitGroup // close retired stores once idle
}

// OpenStore opens the store a configuration names: memory (store/memstore)
// or redis (store/redisstore, its lines logged to log). A Redis store
// reports a failure as an error and the engine of the gateway's middleware
// applies on_error. A Redis that does not answer yet is no error: the
// store starts failing every call (so on_error answers) and switches to
// Redis once it answers (redisstore.Config.DialInBackground); only a
// malformed URL is.
func OpenStore(cfg *config.Config, log *slog.Logger) (portero.Store, error) {
	switch cfg.StoreType {
	case "memory":
		return memstore.New(memstore.Config{MaxKeys: cfg.MaxKeys})
	case "redis":
		return redisstore.New(redisstore.Config{URL: cfg.StoreURL, Timeout: cfg.StoreTimeout,
			Logger: log, DialInBackground: true})
	}
	return nil, fmt.Errorf("store type %q: unknown", cfg.StoreType)
}

// storeSettings are the settings OpenStore builds a store from. A reload
// opens a new store when they change and keeps the running one, with its
// counters, otherwise. on_error and local_share are the middleware's
// engine's, never the store's, so changing them keeps the store.
type storeSettings struct {
	typ, url string
	maxKeys  int
	timeout  time.Duration
}

func storeKey(cfg *config.Config) storeSettings {
	k := storeSettings{typ: cfg.StoreType, url: cfg.StoreURL, maxKeys: cfg.MaxKeys}
	if cfg.StoreType != "memory" {
		k.timeout = cfg.StoreTimeout
	}
	return k
}

// load reads the configuration, logging its warnings (at the start and at
// every reload, so that they are not forgotten).
func (s *Server) load() (*config.Config, error) {
	load := config.LoadDefault
	if s.opts.ConfigPath != "" {
		load = func() (*config.Config, error) { return config.Load(s.opts.ConfigPath) }
	}
	cfg, err := load()
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings {
		s.log.Warn("configuration warning", "source", cfg.Source, "warning", w.String())
	}
	return cfg, nil
}

// currentStore is the store of the running configuration, for the admin
// API.
func (s *Server) currentStore() portero.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store.Store
}

// degraded reports whether the store is answering from its failure policy
// (the Redis store's fallback).
func (s *Server) degraded() bool {
	if rs := s.redis.Load(); rs != nil {
		return rs.Degraded()
	}
	return false
}

// storeUnreached reports whether the store has not reached its backend
// yet: a Redis store started while Redis was down (it dials in the
// background).
func (s *Server) storeUnreached() bool {
	if rs := s.redis.Load(); rs != nil {
		return !rs.Connected()
	}
	return false
}

// readyCheck is the store's part of readiness: with on_error: deny an
// instance that has not reached Redis yet can only answer 503, so it says
// it is not ready and load balancers send the traffic elsewhere. Under
// allow and local it serves, and is ready. Once connected it stays ready
// through later outages: those are decided per call by the failure policy
// and end by themselves, where a not-ready instance would get no call to
// find out that Redis is back.
func (s *Server) readyCheck() error {
	if s.gw.Config().OnError == portero.FailDeny && s.storeUnreached() {
		return errors.New("redis has not answered yet and store.on_error is deny")
	}
	return nil
}

// setStore makes st the current store and retires the one it replaces,
// which is closed once the calls in it are done; s.mu is held or no
// request runs yet.
func (s *Server) setStore(st *leased, key storeSettings) {
	old := s.store
	s.store, s.storeKey = st, key
	rs, _ := st.Store.(*redisstore.Store)
	s.redis.Store(rs)
	if old == nil {
		return
	}
	idle := old.retire(st)
	s.closers.Go(func() {
		<-idle
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := old.Store.Close(cctx); err != nil {
			s.log.Warn("closing the replaced store", "err", err)
		}
	})
}

func (s *Server) adminToken() string { return s.gw.Config().AdminToken }

// Run loads the configuration, listens, prints the addresses to
// opts.Stdout and serves until ctx is done; then it drains, stops
// accepting, lets in-flight requests finish (up to the configured
// shutdown_timeout), closes the store and returns. A bad configuration is
// an error before anything listens. The lifecycle (listeners, TLS,
// reloads, the drain and the shutdown) is package lifecycle's Service, the
// one `portero rls` runs too.
func Run(ctx context.Context, opts Options) error {
	s := &Server{opts: opts, log: opts.Logger, now: opts.Now, metrics: newMetrics()}
	if s.log == nil {
		s.log = slog.Default()
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
	sampler := opts.LogSampler
	if sampler == nil {
		sampler = logging.NewSampler(logging.DefaultPerSecond)
	}
	s.obs = &observer{m: s.metrics, log: s.log, refused: &refusals{}, now: s.now, degraded: s.degraded, sample: sampler,
		usage: dashboard.NewUsage(0)}

	// The watcher starts before the file is read, so that a change in
	// between is a reload rather than lost.
	var watchPath string
	if opts.Watch {
		watchPath = opts.ConfigPath
	}
	// Reloads come from the signal, the configuration's watcher and, once
	// the configuration names one, the API keys file's.
	triggers, forward, stopForward := reloads()
	defer stopForward()
	svc := lifecycle.Start(lifecycle.Options{Name: "portero", Stdout: opts.Stdout, Logger: s.log,
		Watch: watchPath, WatchOptions: opts.WatchOptions, Reload: opts.Reload, Triggers: triggers, Hurry: opts.Hurry})
	defer svc.Close()
	s.ready = svc.Readiness()
	cfg, err := s.load()
	if err != nil {
		return err
	}
	if kf := cfg.Gateway.KeysFile; opts.Watch && kf != "" {
		wo := opts.WatchOptions
		if wo.Logger == nil {
			wo.Logger = s.log
		}
		if w, err := watch.New(kf, wo); err != nil {
			s.log.Warn("cannot watch the API keys file; reload with SIGHUP", "path", kf, "err", err)
		} else {
			defer w.Close()
			forward(w.C, "API keys file change")
		}
	}
	st, err := s.opts.OpenStore(cfg, s.log)
	if err != nil {
		return err
	}
	store := newLeased(st)
	s.setStore(store, storeKey(cfg))
	defer func() {
		// Stores replaced by reloads close as their last calls finish;
		// by now no request runs, so this waits only for the closes.
		s.closers.Wait()
		s.mu.Lock()
		cur := s.store.Store
		s.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := cur.Close(cctx); err != nil {
			s.log.Warn("closing the store", "err", err)
		}
	}()
	if rs, ok := st.(*redisstore.Store); ok && !rs.Connected() {
		s.log.Warn("redis does not answer yet: serving under the failure policy until it does", "on_error", cfg.OnError,
			"ready", cfg.OnError != portero.FailDeny)
	}
	if s.access, err = s.openAccessLog(opts.AccessLog); err != nil {
		return err
	}
	if s.access != nil {
		defer func() {
			if err := s.access.Close(); err != nil {
				s.log.Warn("closing the access log", "err", err)
			}
		}()
	}
	s.setLogSpec(cfg)
	hooks := gateway.Hooks{
		OnDecision:   s.obs.onDecision,
		OnError:      s.obs.onError,
		OnProxyError: s.obs.onProxyError,
		OnShed:       s.obs.onShed,
		Now:          opts.Now,
		Ready:        s.ready.Ready,
	}
	if s.access != nil {
		hooks.OnRoute = onRoute
		hooks.OnAnswered = noteAnswered
		hooks.OnDecision = func(r *http.Request, v *engine.Verdict, took time.Duration) {
			s.obs.onDecision(r, v, took)
			noteDecision(r, v)
		}
		hooks.OnError = func(r *http.Request, err error) {
			s.obs.onError(r, err)
			noteError(r, err)
		}
	}
	s.gw, err = gateway.New(cfg, store, hooks)
	if err != nil {
		return err
	}
	var gwHandler http.Handler = s.gw
	if s.access != nil {
		gwHandler = s.accessLogged(s.gw)
	}
	s.obs.setPolicy(cfg.Policy)
	s.metrics.configRules.Set(float64(len(cfg.Policy.Rules())))
	s.loadedAt.Store(time.Now().UnixNano())

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

	gwTLS, err := reloader(cfg.ServerTLS, s.log)
	if err != nil {
		return err
	}
	gwSrv := &http.Server{
		Handler:           gwHandler,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	gwAddr, err := svc.Listen(lifecycle.Listener{Name: "gateway", Addr: listen, Server: gwSrv, TLS: gwTLS, Public: true})
	if err != nil {
		return err
	}
	addrs := [2]string{gwAddr.String()}
	if adminListen != "" {
		adminTLS, err := reloader(cfg.AdminTLS, s.log)
		if err != nil {
			return err
		}
		s.dash = dashboard.New(dashSource{s}, dashboard.Options{Token: s.adminToken})
		adminSrv := s.base().server(s.log, s.adminRoutes)
		adminSrv.RegisterOnShutdown(s.dash.Close) // its event streams would hold the shutdown
		adminAddr, err := svc.Listen(lifecycle.Listener{Name: "admin", Addr: adminListen, Server: adminSrv,
			TLS: adminTLS, Credentials: true, Auth: cfg.AdminToken != "" || adminTLS != nil && adminTLS.ClientAuth(),
			Risk: "read the metrics and the configuration and reset any client's limits",
			Note: "(dashboard /dashboard/, /metrics, /config, /api/refused)"})
		if err != nil {
			return err
		}
		addrs[1] = adminAddr.String()
	}
	s.addrs.Store(&addrs)
	s.ready.AddCheck(s.readyCheck)

	// Goroutines of this Run beside the service's: stopped (in this
	// order) when it returns.
	var wg sync.WaitGroup
	defer wg.Wait()
	bctx, stopBeside := context.WithCancel(ctx)
	defer stopBeside()
	if s.access != nil && opts.Reopen != nil {
		wg.Go(func() { s.reopenLoop(bctx, opts.Reopen) })
	}
	if s.dash != nil {
		wg.Go(func() { s.dash.Run(bctx) })
	}

	return svc.Run(ctx, lifecycle.Hooks{
		Serving: func() {
			fmt.Fprintf(opts.Stdout, "portero: config %s: %s\n", cfg.Source, cfg.Summary())
			if hint := tryHint(cfg, svc.URL("gateway")); hint != "" {
				fmt.Fprintf(opts.Stdout, "portero: try: %s\n", hint)
			}
		},
		Reload: func(why string) { _ = s.Reload(why) },
		// Read at stop time: a reload may have changed them.
		DrainPeriod: func() time.Duration {
			if s.opts.DrainPeriod != nil {
				return *s.opts.DrainPeriod
			}
			return s.gw.Config().DrainPeriod
		},
		ShutdownTimeout: func() time.Duration { return s.gw.Config().ShutdownTimeout },
	})
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
		st, err := s.opts.OpenStore(cfg, s.log)
		if err != nil {
			s.metrics.reloads.WithLabelValues("error").Inc()
			s.log.Error("configuration refused: cannot open its store; keeping the running one", "reason", why, "error", err)
			return err
		}
		store = newLeased(st)
	}
	if err := s.gw.Update(cfg, store); err != nil {
		if store != s.store {
			_ = store.Store.Close(context.Background())
		}
		s.metrics.reloads.WithLabelValues("error").Inc()
		s.log.Error("configuration refused; keeping the running one", "reason", why, "error", err)
		return err
	}
	if store != s.store {
		s.log.Info("store changed: counters start afresh", "type", cfg.StoreType)
		// Requests still using the old store finish with it; it closes
		// when the last of them is done.
		s.setStore(store, key)
	}
	s.obs.setPolicy(cfg.Policy)
	s.setLogSpec(cfg)
	s.loadedAt.Store(time.Now().UnixNano())
	if cfg.Listen != old.Listen || cfg.AdminListen != old.AdminListen {
		s.log.Warn("listener addresses changed in the file; they apply at the next restart")
	}
	if !reflect.DeepEqual(cfg.ServerTLS, old.ServerTLS) || !reflect.DeepEqual(cfg.AdminTLS, old.AdminTLS) {
		// The files named at the start are read again when they change;
		// other file names need a restart.
		s.log.Warn("TLS file names changed in the file; they apply at the next restart (the files in use are reloaded when their content changes)")
	}
	s.metrics.reloads.WithLabelValues("ok").Inc()
	s.metrics.configRules.Set(float64(len(cfg.Policy.Rules())))
	ch := config.CompareRules(old, cfg)
	s.log.Info("configuration reloaded", "reason", why, "source", cfg.Source, "rules", len(cfg.Policy.Rules()),
		"added", len(ch.Added), "removed", len(ch.Removed), "changed", len(ch.Changed), "changes", ch.String())
	return nil
}

// reloads returns a channel of reload triggers for the lifecycle and
// forward, which feeds it from another channel (a keys file watcher's),
// each change sent with the reason why, until stop, which waits for the
// forwarding goroutines.
func reloads() (triggers chan string, forward func(c <-chan struct{}, why string), stop func()) {
	triggers = make(chan string, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	forward = func(c <-chan struct{}, why string) {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				case _, ok := <-c:
					if !ok {
						return
					}
					select {
					case triggers <- why:
					default: // one is pending already
					}
				}
			}
		})
	}
	return triggers, forward, func() { close(done); wg.Wait() }
}
