// Package server wires Portero's two serving commands onto package
// lifecycle: Run is `portero serve` (the gateway, its admin listener with
// /config, /api/refused, /api/keys and the dashboard, the access log, the
// metrics of package servemetrics, reloads), and RunRLS, in the files
// rls*.go, is `portero rls`. Each returns only after every goroutine it
// started has stopped.
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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/admin"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/internal/gatewaylog"
	"github.com/portero-rl/portero/internal/lifecycle"
	"github.com/portero-rl/portero/internal/logging"
	"github.com/portero-rl/portero/internal/servemetrics"
	"github.com/portero-rl/portero/internal/tlsreload"
	"github.com/portero-rl/portero/internal/watch"
	"github.com/portero-rl/portero/store/budget"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

// Options configure Run; the zero value serves the embedded default
// configuration.
type Options struct {
	// ConfigPath is the YAML file; empty means the embedded default.
	ConfigPath string
	// Listen and AdminListen override the configuration's addresses when
	// not empty; AdminListen "off" turns the admin listener off.
	Listen, AdminListen string
	// Stdout receives the addresses listened on (nil: io.Discard), Logger
	// the logs (nil: slog.Default()).
	Stdout io.Writer
	Logger *slog.Logger
	// Reload triggers a reload per value (SIGHUP), Reopen reopens the
	// access log per value (SIGUSR1), Hurry ends the drain early (a second
	// SIGTERM).
	Reload, Reopen, Hurry <-chan struct{}
	// DrainPeriod, when not nil, overrides server.drain_period.
	DrainPeriod *time.Duration
	// Watch reloads when the configuration file changes.
	Watch        bool
	WatchOptions watch.Options
	// LogSampler bounds the refusal lines per rule (nil:
	// logging.DefaultPerSecond a second).
	LogSampler *logging.Sampler
	// Now is the limiter's clock; nil means time.Now.
	Now       func() time.Time
	AccessLog gatewaylog.Options // the zero value is none
	// OpenStore opens a configuration's store; nil opens the one it names.
	OpenStore func(cfg *config.Config, log *slog.Logger) (portero.Store, error)
}

// Server is one running `portero serve`.
type Server struct {
	opts  Options
	log   *slog.Logger
	obs   *servemetrics.Observer
	gw    *gateway.Gateway
	now   func() time.Time
	ready *lifecycle.Readiness

	dash     *dashboard.Dashboard // nil without an admin listener
	loadedAt atomic.Int64         // unix ns when the running configuration was applied
	access   *gatewaylog.Log      // nil when off
	addrs    atomic.Pointer[[2]string]

	mu       sync.Mutex // guards store, storeKey and serializes reloads
	store    *leased
	redis    atomic.Pointer[redisstore.Store] // store, when it is a Redis store: read per request without mu
	storeKey storeSettings
	closers  sync.WaitGroup // close retired stores once idle
}

// openStore opens the store a configuration names: memory or redis. A
// Redis that does not answer yet is no error: the store fails every call
// (so that store.on_error answers) and switches to Redis once it answers
// (redisstore.Config.DialInBackground); only a malformed URL is.
func openStore(cfg *config.Config, log *slog.Logger) (portero.Store, error) {
	switch cfg.StoreType {
	case "memory":
		return memstore.New(memstore.Config{MaxKeys: cfg.MaxKeys})
	case "redis":
		return redisstore.New(redisstore.Config{URL: cfg.StoreURL, Timeout: cfg.StoreTimeout,
			Logger: log, DialInBackground: true})
	}
	return nil, fmt.Errorf("store type %q: unknown", cfg.StoreType)
}

// withBudgets puts a store that can lease behind store/budget, swept on
// the clock now, so that the rules with a budget are served from leased
// budgets at every door; the other rules pass through.
func withBudgets(st portero.Store, err error, now func() time.Time) (portero.Store, error) {
	if err != nil {
		return nil, err
	}
	if _, ok := st.(portero.Taker); !ok {
		return st, nil
	}
	b, err := budget.New(st, budget.Config{Now: now})
	if err != nil {
		_ = st.Close(context.Background())
		return nil, err
	}
	return b, nil
}

// openWithBudgets opens cfg's store (Options.OpenStore) behind leased budgets.
func (s *Server) openWithBudgets(cfg *config.Config) (portero.Store, error) {
	st, err := s.opts.OpenStore(cfg, s.log)
	return withBudgets(st, err, s.now)
}

// backend is the store st takes its budgets from, or st.
func backend(st portero.Store) portero.Store {
	if b, ok := st.(*budget.Store); ok {
		return b.Shared()
	}
	return st
}

// storeSettings are the settings a store is opened from. A reload opens a
// new store when they change and keeps the running one, with its
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

// currentStore is the store of the running configuration.
func (s *Server) currentStore() portero.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store.Store
}

// budgetStats are the leased budgets' counters of the current store.
func (s *Server) budgetStats() (budget.Stats, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.store == nil {
		return budget.Stats{}, false
	}
	return statsOf(s.store.Store)
}

// statsOf returns st's leased budgets' counters when st serves them.
func statsOf(st portero.Store) (budget.Stats, bool) {
	b, ok := st.(*budget.Store)
	if !ok {
		return budget.Stats{}, false
	}
	return b.Stats(), true
}

// degraded reports whether a Redis store is failing, so that the failure
// policy decides.
func (s *Server) degraded() bool {
	if rs := s.redis.Load(); rs != nil {
		return rs.Degraded()
	}
	return false
}

// storeNodeGauge is portero_store_node_unavailable for the Redis store
// that redis returns at each scrape (none without one: nil).
func storeNodeGauge(redis func() *redisstore.Store) prometheus.Collector {
	return admin.NewNodeGauge(func() []admin.NodeState {
		rs := redis()
		if rs == nil {
			return nil
		}
		var out []admin.NodeState
		for _, n := range rs.Nodes() {
			out = append(out, admin.NodeState{Node: n.Node, Slots: n.Slots, Unavailable: n.Unavailable})
		}
		return out
	})
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
	rs, _ := backend(st.Store).(*redisstore.Store)
	s.redis.Store(rs)
	if old == nil {
		return
	}
	idle := old.retire(st)
	s.closers.Go(func() {
		<-idle
		s.closeStore(old.Store, "closing the replaced store")
	})
}

func (s *Server) closeStore(st portero.Store, what string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.Close(ctx); err != nil {
		s.log.Warn(what, "err", err)
	}
}

func (s *Server) adminToken() string { return s.gw.Config().AdminToken }

// Run loads the configuration, listens, prints the addresses and serves
// until ctx is done; then it drains, lets in-flight requests finish (up to
// shutdown_timeout), closes the store and returns. A bad configuration is
// an error before anything listens.
func Run(ctx context.Context, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.OpenStore == nil {
		opts.OpenStore = openStore
	}
	s := &Server{opts: opts, log: opts.Logger, now: opts.Now}
	s.obs = servemetrics.New(servemetrics.Options{Logger: s.log, Now: s.now, Degraded: s.degraded, Sampler: opts.LogSampler})
	s.obs.Registry().MustRegister(storeNodeGauge(s.redis.Load))
	admin.RegisterBudgets(s.obs.Registry(), s.budgetStats)

	// Reloads come from the signal, the configuration's watcher and, once
	// the configuration names one, the API keys file's. The watcher starts
	// before the file is read, so that a change in between is a reload.
	var watchPath string
	if opts.Watch {
		watchPath = opts.ConfigPath
	}
	svc := lifecycle.Start(lifecycle.Options{Name: "portero", Stdout: opts.Stdout, Logger: s.log,
		Watch: watchPath, WatchOptions: opts.WatchOptions, Reload: opts.Reload, Hurry: opts.Hurry})
	defer svc.Close()
	s.ready = svc.Readiness()
	cfg, err := s.load()
	if err != nil {
		return err
	}
	if kf := cfg.Gateway.KeysFile; opts.Watch && kf != "" {
		svc.Watch(kf, "the API keys file", "API keys file change")
	}
	err = s.start(cfg)
	if s.store != nil {
		defer func() {
			// Stores replaced by reloads close as their last calls finish;
			// by now no request runs, so this waits only for the closes.
			s.closers.Wait()
			s.closeStore(s.currentStore(), "closing the store")
		}()
	}
	if s.access != nil {
		defer func() {
			if err := s.access.Close(); err != nil {
				s.log.Warn("closing the access log", "err", err)
			}
		}()
	}
	if err != nil {
		return err
	}
	if err := s.listen(svc, cfg); err != nil {
		return err
	}

	// Goroutines beside the service's, stopped (cancel, then wait) when
	// Run returns.
	var wg sync.WaitGroup
	defer wg.Wait()
	bctx, stopBeside := context.WithCancel(ctx)
	defer stopBeside()
	if s.access != nil && opts.Reopen != nil {
		wg.Go(func() { s.access.ReopenOn(bctx, opts.Reopen, s.log) })
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

// start opens the store and the access log of cfg and builds the gateway
// over them, with its hooks into the metrics and the access log. What it
// opened is in s even when it fails, for Run to close.
func (s *Server) start(cfg *config.Config) error {
	st, err := s.openWithBudgets(cfg)
	if err != nil {
		return err
	}
	store := newLeased(st)
	s.setStore(store, storeKey(cfg))
	if s.storeUnreached() {
		s.log.Warn("redis does not answer yet: serving under the failure policy until it does", "on_error", cfg.OnError,
			"ready", cfg.OnError != portero.FailDeny)
	}
	if s.access, err = gatewaylog.Open(s.opts.AccessLog, s.opts.Stdout, s.obs.Registry(), s.now); err != nil {
		return err
	}
	hooks := gateway.Hooks{OnDecision: s.obs.OnDecision, OnError: s.obs.OnError, OnProxyError: s.obs.OnProxyError,
		OnShed: s.obs.OnShed, Now: s.opts.Now, Ready: s.ready.Ready}
	if s.access != nil {
		s.access.SetConfig(cfg)
		hooks.OnRoute, hooks.OnAnswered = gatewaylog.NoteRoute, gatewaylog.NoteAnswered
		hooks.OnDecision = func(r *http.Request, v *engine.Verdict, took time.Duration) {
			s.obs.OnDecision(r, v, took)
			gatewaylog.NoteDecision(r, v)
		}
		hooks.OnError = func(r *http.Request, err error) {
			s.obs.OnError(r, err)
			gatewaylog.NoteError(r, err)
		}
	}
	if s.gw, err = gateway.New(cfg, store, hooks); err != nil {
		return err
	}
	s.obs.SetPolicy(cfg.Policy)
	s.loadedAt.Store(time.Now().UnixNano())
	return nil
}

// listen binds the gateway's listener and, unless it is off, the admin
// listener, each with its TLS.
func (s *Server) listen(svc *lifecycle.Service, cfg *config.Config) error {
	listen, adminListen := cfg.Listen, cfg.AdminListen
	if s.opts.Listen != "" {
		listen = s.opts.Listen
	}
	if s.opts.AdminListen == "off" {
		adminListen = ""
	} else if s.opts.AdminListen != "" {
		adminListen = s.opts.AdminListen
	}
	gwTLS, err := tlsreload.Optional(cfg.ServerTLS, s.log)
	if err != nil {
		return err
	}
	var handler http.Handler = s.gw
	if s.access != nil {
		handler = s.access.Handler(s.gw)
	}
	gwSrv := &http.Server{Handler: handler, ReadHeaderTimeout: cfg.ReadHeaderTimeout, ReadTimeout: cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout, IdleTimeout: cfg.IdleTimeout, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	gwAddr, err := svc.Listen(lifecycle.Listener{Name: "gateway", Addr: listen, Server: gwSrv, TLS: gwTLS, Public: true})
	if err != nil {
		return err
	}
	addrs := [2]string{gwAddr.String()}
	if adminListen != "" {
		adminTLS, err := tlsreload.Optional(cfg.AdminTLS, s.log)
		if err != nil {
			return err
		}
		s.dash = dashboard.New(dashSource{s}, dashboard.Options{Token: s.adminToken})
		adminSrv := admin.Listener{Registry: s.obs.Registry(), Ready: s.ready, Dashboard: s.dash, Token: s.adminToken}.Server(s.log, s.adminRoutes)
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
	return nil
}

// Reload reads the configuration again and applies it whole, or logs every
// error of a bad file and keeps the running configuration. Unchanged rules
// keep their counters (the store is kept unless its section changed);
// listener addresses need a restart.
func (s *Server) Reload(why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.reload(why)
	s.obs.Reloaded(err)
	return err
}

func (s *Server) reload(why string) error {
	cfg, err := s.load()
	if err != nil {
		var es config.Errors
		if !errors.As(err, &es) {
			s.log.Error("configuration refused; keeping the running one", "reason", why, "error", err)
		}
		for _, e := range es {
			s.log.Error("configuration refused; keeping the running one", "reason", why, "error", e.Error())
		}
		return err
	}
	old := s.gw.Config()
	store, key := s.store, storeKey(cfg)
	if key != s.storeKey {
		st, err := s.openWithBudgets(cfg)
		if err != nil {
			s.log.Error("configuration refused: cannot open its store; keeping the running one", "reason", why, "error", err)
			return err
		}
		store = newLeased(st)
	}
	if err := s.gw.Update(cfg, store); err != nil {
		if store != s.store {
			_ = store.Store.Close(context.Background())
		}
		s.log.Error("configuration refused; keeping the running one", "reason", why, "error", err)
		return err
	}
	if store != s.store {
		s.log.Info("store changed: counters start afresh", "type", cfg.StoreType)
		// Requests still using the old store finish with it; it closes
		// when the last of them is done.
		s.setStore(store, key)
	}
	s.obs.SetPolicy(cfg.Policy)
	if s.access != nil {
		s.access.SetConfig(cfg)
	}
	s.loadedAt.Store(time.Now().UnixNano())
	if cfg.Listen != old.Listen || cfg.AdminListen != old.AdminListen {
		s.log.Warn("listener addresses changed in the file; they apply at the next restart")
	}
	if !reflect.DeepEqual(cfg.ServerTLS, old.ServerTLS) || !reflect.DeepEqual(cfg.AdminTLS, old.AdminTLS) {
		// The files named at the start are read again when they change;
		// other file names need a restart.
		s.log.Warn("TLS file names changed in the file; they apply at the next restart (the files in use are reloaded when their content changes)")
	}
	ch := config.CompareRules(old, cfg)
	s.log.Info("configuration reloaded", "reason", why, "source", cfg.Source, "rules", len(cfg.Policy.Rules()),
		"added", len(ch.Added), "removed", len(ch.Removed), "changed", len(ch.Changed), "changes", ch.String())
	return nil
}
