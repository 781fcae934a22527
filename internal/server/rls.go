package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/portero-rl/portero/internal/admin"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/checkapi"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/lifecycle"
	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/internal/rlscache"
	"github.com/portero-rl/portero/internal/rlsstats"
	"github.com/portero-rl/portero/internal/rlstrace"
	"github.com/portero-rl/portero/internal/rlsxds"
	"github.com/portero-rl/portero/internal/tlsreload"
	"github.com/portero-rl/portero/internal/watch"
	"github.com/portero-rl/portero/store/budget"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

// Defaults of `portero rls`'s listeners: loopback, clear of serve's 8080
// and 9090 so that both run side by side with their defaults.
const (
	DefaultRLSGRPCListen  = "127.0.0.1:8081"
	DefaultRLSHTTPListen  = "127.0.0.1:8082"
	DefaultRLSAdminListen = "127.0.0.1:9091"
	// DefaultRLSShutdownTimeout is how long calls in flight get at stop.
	DefaultRLSShutdownTimeout = 5 * time.Second
)

// RLSOptions configure RunRLS: `portero rls`, Envoy's rate limit service
// (gRPC), the HTTP check API and the admin listener. Only ConfigPath is
// required; the zero value of every other field is its default. These are
// the settings envoyproxy/ratelimit's environment (PORT, GRPC_PORT,
// DEBUG_PORT, BACKEND_TYPE, REDIS_URL, …) maps onto.
type RLSOptions struct {
	// ConfigPath is the envoyproxy/ratelimit YAML: a file or a directory
	// of *.yaml files. MergeDomains is its MERGE_DOMAIN_CONFIG.
	ConfigPath   string
	MergeDomains bool
	// AllowUnknownDomains answers OK for a domain not configured, as
	// envoyproxy/ratelimit does; by default it is NOT_FOUND.
	AllowUnknownDomains bool

	// GRPCListen, HTTPListen and AdminListen are the addresses (empty for
	// the Default constants, "off" for none); GRPCListen may be
	// "unix:PATH" (rls.Listen).
	GRPCListen, HTTPListen, AdminListen string
	// GRPC are the gRPC server's options: transport, TLS, caps, timeouts
	// (its ShutdownGrace is ShutdownTimeout).
	GRPC rls.ServerOptions
	// HTTPTLS and AdminTLS serve TLS on the HTTP and admin listeners from
	// files reloaded when they change; a ClientCAFile requires client
	// certificates.
	HTTPTLS, AdminTLS tlsreload.Files
	// AdminToken, when not empty, is the bearer token the admin listener
	// requires (but for /healthz and /readyz).
	AdminToken string

	// Store is "memory" (the default) or "redis", at RedisURL.
	Store, RedisURL string
	// OnStoreError is the failure policy of gRPC and /v1/check when the
	// store fails, AuthOnStoreError that of /v1/auth; empty is the
	// engine's default (engine.Options.OnError), as at every door. One
	// policy for both is one engine, so that FailLocal keeps one local
	// count per limit. LocalShare is the share of each limit FailLocal
	// admits.
	OnStoreError, AuthOnStoreError portero.FailurePolicy
	LocalShare                     float64
	// NearLimit is the share of a limit used from which an admitted
	// descriptor counts as near-limit (0: engine.DefaultNearLimit).
	NearLimit float64
	// ClientIP finds /v1/auth's client address; AuthDomain is the domain of
	// /v1/auth requests that name none.
	ClientIP   clientip.Config
	AuthDomain string
	// NoHeaders leaves the RateLimit fields out of the answers.
	NoHeaders bool
	// CallTimeout bounds one decision (0: 1s).
	CallTimeout time.Duration
	// MaxDetailedSeries caps the metric series that detailed_metric
	// descriptors add, one per distinct value (0: DefaultMaxDetailedSeries).
	MaxDetailedSeries int

	// DrainPeriod is how long /readyz answers 503 on stop before the
	// listeners close (nil: 5s; only when something asked /readyz since
	// the start); ShutdownTimeout how long calls in flight then get (0:
	// DefaultRLSShutdownTimeout).
	DrainPeriod     *time.Duration
	ShutdownTimeout time.Duration
	// Reload triggers a reload for every value received (SIGHUP); Hurry
	// ends the drain early (a second SIGTERM).
	Reload, Hurry <-chan struct{}
	// Watch reloads when the configuration changes (package watch).
	Watch        bool
	WatchOptions watch.Options

	// Stdout receives the addresses listened on; Logger the logs (nil:
	// io.Discard and slog.Default()).
	Stdout io.Writer
	Logger *slog.Logger
	// Now is the clock of the decisions; nil means time.Now.
	Now func() time.Time
	// DashboardTicks, when not nil, are the instants the dashboard samples
	// at (dashboard.Options.Ticks); nil samples every second.
	DashboardTicks <-chan time.Time

	// RedisTimeout bounds each call of the Redis store
	// (redisstore.DefaultTimeout when 0; envoyproxy/ratelimit's
	// REDIS_TIMEOUT).
	RedisTimeout time.Duration
	// RedisTLS, when set, are the TLS files of the Redis stores whose URL
	// is rediss:// or rediss-sentinel:// (a private CA, a client
	// certificate; envoyproxy/ratelimit's REDIS_TLS_*).
	RedisTLS *redisstore.TLSFiles
	// RedisPerSecondURL, when set with the Redis store, keeps the plain
	// counters of one-second windows (engine.CountEach's per-second
	// limits) in this second Redis, as envoyproxy/ratelimit's
	// REDIS_PERSECOND_URL (redisstore.PerSecond); RedisPerSecondTimeout
	// bounds each call there (RedisTimeout when 0).
	RedisPerSecondURL     string
	RedisPerSecondTimeout time.Duration
	// Envoyproxy is the compatibility with envoyproxy/ratelimit (`portero
	// rls --compat envoyproxy` and its improvements' flags).
	Envoyproxy EnvoyproxyOptions
	// XDS, when set, takes the configuration from an xDS management server
	// (package rlsxds, envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW)
	// instead of ConfigPath, which must then be empty; its Load options are
	// RunRLS's.
	XDS *rlsxds.Options
	// Tracing, when set, traces every call with OpenTelemetry, exported
	// over OTLP (package rlstrace, envoyproxy/ratelimit's TRACING_*).
	Tracing *rlstrace.Options
	// Statsd, when set, sends envoyproxy/ratelimit's statistics to statsd
	// (package rlsstats); RunRLS fills in what it knows: the configuration,
	// the counting, NearLimit, the shadow mode, MaxDetailedSeries, Logger.
	Statsd *rlsstats.Options
}

// EnvoyproxyOptions make RunRLS answer as envoyproxy/ratelimit does (see
// rls.Compat and docs/envoy.md), and bring Portero's improvements back one
// at a time. The zero value is Portero's own answers.
type EnvoyproxyOptions struct {
	// Compat, when set, answers as envoyproxy/ratelimit does; it also reads
	// the files as it does (envoyconf.Options.Envoyproxy), compiles with its
	// keys and bounds (descriptor.Options.Envoyproxy), serves when the
	// configuration fails at start-up (answering that none is loaded until
	// one does), and takes an empty ConfigPath as no configuration.
	Compat *rls.Compat
	// Counting is the engines' counting: engine.CountEach is
	// envoyproxy/ratelimit's (empty: engine.AllOrNothing);
	// StopIncrementWhenOver and CounterJitter go with it.
	Counting              engine.Counting
	StopIncrementWhenOver bool
	CounterJitter         time.Duration
	// LocalCacheSize, under engine.CountEach, is the size in bytes of
	// envoyproxy/ratelimit's local cache of the counters over their limit
	// (its LOCAL_CACHE_SIZE_IN_BYTES; package rlscache); 0 for none.
	LocalCacheSize int
	// KeyPrefix is its CACHE_KEY_PREFIX (under Compat).
	KeyPrefix string
	// IgnoreDotFiles is its RUNTIME_IGNOREDOTFILES (under Compat); QuotaMode
	// its QUOTA_MODE (every limit in quota_mode, descriptor.Options.QuotaMode);
	// ShadowMode its SHADOW_MODE (engine.Options.ShadowAll: every request
	// OK, the statuses unchanged).
	IgnoreDotFiles, QuotaMode, ShadowMode bool
	// HealthyWithConfig fails /healthcheck until a configuration with a
	// domain is loaded (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	HealthyWithConfig bool
}

func (e *EnvoyproxyOptions) load(merge bool) envoyconf.Options {
	return envoyconf.Options{MergeDomains: merge, Envoyproxy: e.Compat != nil, IgnoreDotFiles: e.IgnoreDotFiles, QuotaMode: e.QuotaMode}
}

// loadRLSConfig loads the configuration at path; no path (under Compat,
// envoyproxy/ratelimit without RUNTIME_SUBDIRECTORY) is one without domains.
func loadRLSConfig(path string, opts envoyconf.Options) (*descriptor.Config, error) {
	if path == "" {
		return descriptor.NewConfig(nil, nil)
	}
	return envoyconf.Load(path, opts)
}

// ConfigError reports a configuration or a setting that cannot run (the
// envoyproxy/ratelimit YAML does not load, a transport that does not
// exist): the operator must change what they gave. `portero rls` exits 2.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func listenAddr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// rlsAddrs are the addresses of RunRLS's listeners, "off" for none.
type rlsAddrs struct{ grpc, http, admin string }

// prepare checks what RunRLS cannot run with and fills in o's defaults.
func (o *RLSOptions) prepare() (rlsAddrs, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	compat := o.Envoyproxy.Compat != nil
	switch {
	case o.XDS != nil && o.ConfigPath != "":
		return rlsAddrs{}, &ConfigError{errors.New("the configuration comes from files or over xDS, not both")}
	case o.ConfigPath == "" && !compat && o.XDS == nil:
		return rlsAddrs{}, &ConfigError{errors.New("an envoyproxy/ratelimit configuration (a file or a directory) is required")}
	}
	addrs := rlsAddrs{grpc: listenAddr(o.GRPCListen, DefaultRLSGRPCListen), http: listenAddr(o.HTTPListen, DefaultRLSHTTPListen),
		admin: listenAddr(o.AdminListen, DefaultRLSAdminListen)}
	if addrs.grpc == "off" && addrs.http == "off" {
		return rlsAddrs{}, &ConfigError{errors.New("both the gRPC and the HTTP listeners are off: nothing to serve")}
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultRLSShutdownTimeout
	}
	o.GRPC.ShutdownGrace = o.ShutdownTimeout
	return addrs, nil
}

// RunRLS runs `portero rls` until ctx is done, on the lifecycle `portero
// serve` runs on (lifecycle.Service): its listeners (gRPC, HTTP, admin),
// reloads on o.Reload and on file change, readiness, then the drain and
// the graceful shutdown. The configuration is read before anything
// listens; an error there is a *ConfigError.
func RunRLS(ctx context.Context, o RLSOptions) error {
	addrs, err := o.prepare()
	if err != nil {
		return err
	}
	log := o.Logger
	var watchPath string
	if o.Watch && o.ConfigPath != "" {
		watchPath = o.ConfigPath
	}
	svc := lifecycle.Start(lifecycle.Options{Name: "portero rls", Stdout: o.Stdout, Logger: log,
		Watch: watchPath, WatchOptions: o.WatchOptions, Reload: o.Reload, Hurry: o.Hurry})
	defer svc.Close()

	tracer, err := newRLSTracer(o, log)
	if err != nil {
		return &ConfigError{err}
	}
	r := &rlsServer{opts: o, log: log, ready: svc.Readiness()}
	if tracer != nil {
		defer shutdownTracer(tracer, log)
		r.opts.GRPC.GRPCOptions = append(r.opts.GRPC.GRPCOptions, tracer.ServerOption())
		r.tracer = tracer
	}
	if r.stats, err = newRLSStats(o, func() *descriptor.Config { return r.compiler.Limits() }); err != nil {
		return &ConfigError{err}
	}
	limits, err := r.loadFirst()
	if err != nil {
		return err
	}
	store, err := openRLSStore(o, log)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := store.Close(cctx); err != nil {
			log.Warn("closing the store", "err", err)
		}
	}()
	if err := r.build(store, limits); err != nil {
		return err
	}
	if err := r.listen(svc, addrs); err != nil {
		return err
	}
	drain := 5 * time.Second
	if o.DrainPeriod != nil {
		drain = *o.DrainPeriod
	}
	// Stopped when Run returns (cancel first, then wait): the statistics
	// flush once more.
	var wg sync.WaitGroup
	defer wg.Wait()
	bctx, stopBackground := context.WithCancel(ctx)
	defer stopBackground()
	r.background(bctx, &wg)
	return svc.Run(ctx, lifecycle.Hooks{
		Reload:          r.reload,
		DrainPeriod:     func() time.Duration { return drain },
		ShutdownTimeout: func() time.Duration { return o.ShutdownTimeout },
	})
}

// shutdownTracer flushes the traces still buffered.
func shutdownTracer(tracer *rlstrace.Tracer, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tracer.Shutdown(sctx); err != nil {
		log.Warn("rls: flushing the traces", "err", err)
	}
}

// loadFirst reads the configuration at the start. Under Compat, as
// envoyproxy/ratelimit, one that fails to load is no error: the service
// answers that none is loaded until one is (and over xDS, none is until
// the server sends one).
func (r *rlsServer) loadFirst() (*descriptor.Config, error) {
	o := &r.opts
	compat := o.Envoyproxy.Compat != nil
	limits, err := loadRLSConfig(o.ConfigPath, o.Envoyproxy.load(o.MergeDomains))
	if o.XDS != nil && compat {
		limits, err = nil, nil
	}
	if r.stats != nil && o.XDS == nil {
		r.stats.Loaded(limits, err, o.ConfigPath != "")
	}
	if err != nil {
		if !compat {
			return nil, &ConfigError{err}
		}
		r.log.Error("rls: the configuration does not load: answering with no configuration loaded until it does", "err", err)
		limits = nil
	}
	return limits, nil
}

// build makes the compiler, the engines and the metrics over store and
// limits.
func (r *rlsServer) build(store portero.Store, limits *descriptor.Config) error {
	o := &r.opts
	compat := o.Envoyproxy.Compat != nil
	// One compiler and one engine for gRPC and /v1/check (the same
	// counters, the same failure policy), and for /v1/auth unless its
	// failure policy differs.
	r.compiler = descriptor.NewCompiler(limits, descriptor.Options{AllowUnknownDomains: o.AllowUnknownDomains,
		Envoyproxy: compat, KeyPrefix: o.Envoyproxy.KeyPrefix, QuotaMode: o.Envoyproxy.QuotaMode})
	ep := o.Envoyproxy
	engOpts := engine.Options{Store: store, OnError: o.OnStoreError, LocalShare: o.LocalShare, NearLimit: o.NearLimit,
		Counting: ep.Counting, StopIncrementWhenOver: ep.StopIncrementWhenOver, CounterJitter: ep.CounterJitter, ShadowAll: ep.ShadowMode}
	if ep.LocalCacheSize > 0 && ep.Counting == engine.CountEach {
		// One cache for the process, as there: both engines count in the
		// same counters.
		engOpts.OverLimitCache = rlscache.New(ep.LocalCacheSize, o.Now)
	}
	var err error
	if r.engine, err = engine.New(engOpts); err != nil {
		return &ConfigError{err}
	}
	r.authEngine = r.engine
	if o.AuthOnStoreError != o.OnStoreError {
		engOpts.OnError = o.AuthOnStoreError
		if r.authEngine, err = engine.New(engOpts); err != nil {
			return &ConfigError{err}
		}
	}
	if limits != nil {
		r.log.Info("rls: configuration loaded", "domains", strings.Join(limits.Domains(), ","), "files", len(limits.Files()), "envoyproxy_compat", compat)
	}
	if rs, ok := backend(store).(interface{ Connected() bool }); ok {
		r.redis = rs
	}
	r.metrics = newRLSMetrics(o.MaxDetailedSeries, r.connected, func() (budget.Stats, bool) { return statsOf(store) })
	if rs, ok := backend(store).(*redisstore.Store); ok { // behind leased budgets too
		r.metrics.reg.MustRegister(storeNodeGauge(func() *redisstore.Store { return rs }))
	}
	if o.Now != nil {
		r.metrics.now = o.Now
	}
	r.metrics.setLimits(limits)
	r.source.Store(&rlsSource{limits: limits, at: time.Now()})
	r.metrics.domains.Set(float64(len(limits.Domains())))
	r.ready.AddCheck(r.readyCheck)
	if r.redis != nil && !r.redis.Connected() {
		r.log.Warn("redis does not answer yet: serving under the failure policy until it does", "on_store_error", r.engine.OnError().String(),
			"ready", r.readyCheck() == nil)
	}
	return nil
}

// background starts, in wg, what runs beside the listeners until ctx is
// done: the dashboard's sampling, the statsd flushes, the xDS client.
func (r *rlsServer) background(ctx context.Context, wg *sync.WaitGroup) {
	if r.dash != nil {
		wg.Go(func() { r.dash.Run(ctx) })
	}
	if r.stats != nil {
		wg.Go(func() { r.stats.Run(ctx) })
	}
	if o := r.opts; o.XDS != nil {
		xo := *o.XDS
		xo.Load, xo.Logger = o.Envoyproxy.load(o.MergeDomains), r.log
		wg.Go(func() {
			if err := rlsxds.Run(ctx, xo, func(c *descriptor.Config, err error) { r.apply("xDS", c, err) }); err != nil {
				r.log.Error("rls: no xDS configuration", "err", err)
			}
		})
	}
}

// rlsServer is one running `portero rls`.
type rlsServer struct {
	opts               RLSOptions
	log                *slog.Logger
	compiler           *descriptor.Compiler
	engine, authEngine *engine.Engine
	ready              *lifecycle.Readiness
	redis              interface{ Connected() bool } // nil for the memory store
	metrics            *rlsMetrics
	stats              *rlsstats.Stats
	tracer             rls.Tracer // nil without tracing
	source             atomic.Pointer[rlsSource]
	dash               *dashboard.Dashboard // nil without an admin listener
	grpc               *rls.Server          // nil without a gRPC listener
	mu                 sync.Mutex           // serializes reloads
}

// rlsSource is the configuration in use, for the admin API.
type rlsSource struct {
	limits *descriptor.Config
	at     time.Time
}

// listen binds the listeners that are not off.
func (r *rlsServer) listen(svc *lifecycle.Service, addrs rlsAddrs) error {
	o := r.opts
	if addrs.grpc != "off" {
		rsvc := rls.NewService(r.compiler, r.engine, rls.ServiceOptions{CallTimeout: o.CallTimeout, NoHeaders: o.NoHeaders, Now: o.Now, Logger: r.log,
			Observer: r.observer("grpc"), Compat: o.Envoyproxy.Compat, Tracer: r.tracer})
		srv, err := rls.NewServer(rsvc, o.GRPC)
		if err != nil {
			return &ConfigError{err}
		}
		r.grpc = srv
		r.configHealth()
		so := srv.Options()
		// The gRPC server authenticates clients by mTLS only.
		if _, err := svc.Listen(lifecycle.Listener{Name: "gRPC", Addr: addrs.grpc, Scheme: "grpc", Note: "(" + string(so.Transport) + ")",
			Server: srv, OnDrain: srv.Drain, OwnTLS: so.TLS.CertFile != "",
			Credentials: true, Auth: so.TLS.ClientCAFile != "", Risk: "spend and read any client's limits",
			Listen: func(addr string) (net.Listener, error) { return rls.Listen(addr, so.SocketMode) }}); err != nil {
			return err
		}
	}
	if addrs.http != "off" {
		h, err := checkapi.New(checkapi.Config{Compiler: r.compiler, Engine: r.engine, AuthEngine: r.authEngine,
			ClientIP: o.ClientIP, DefaultDomain: o.AuthDomain, Timeout: o.CallTimeout, Now: o.Now, Logger: r.log,
			Observer: r.observer("http")})
		if err != nil {
			return &ConfigError{err}
		}
		tlsR, err := tlsreload.Optional(o.HTTPTLS, r.log)
		if err != nil {
			return &ConfigError{fmt.Errorf("HTTP listener TLS: %w", err)}
		}
		// envoyproxy/ratelimit's /json (its gRPC call in proto3 JSON) and
		// /healthcheck beside the check API.
		jsvc := rls.NewService(r.compiler, r.engine, rls.ServiceOptions{CallTimeout: o.CallTimeout, NoHeaders: o.NoHeaders, Now: o.Now, Logger: r.log,
			Observer: r.observer("http"), Compat: o.Envoyproxy.Compat, Tracer: r.tracer})
		mux := http.NewServeMux()
		mux.Handle("/json", jsvc.JSONHandler())
		mux.Handle("/healthcheck", rls.HealthHandler(r.healthy))
		mux.Handle("/", h)
		srv := &http.Server{Handler: admin.Probes(mux, r.ready), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(r.log.Handler(), slog.LevelDebug)}
		if _, err := svc.Listen(lifecycle.Listener{Name: "HTTP", Addr: addrs.http, Server: srv, TLS: tlsR,
			Credentials: true, Auth: tlsR != nil && tlsR.ClientAuth(), Risk: "spend and read any client's limits"}); err != nil {
			return err
		}
	}
	if addrs.admin != "off" {
		tlsR, err := tlsreload.Optional(o.AdminTLS, r.log)
		if err != nil {
			return &ConfigError{fmt.Errorf("admin listener TLS: %w", err)}
		}
		token := func() string { return o.AdminToken }
		r.dash = dashboard.New(rlsDashSource{r}, dashboard.Options{Token: token, Ticks: o.DashboardTicks})
		al := admin.Listener{Registry: r.metrics.reg, Ready: r.ready, Dashboard: r.dash, Token: token}
		if o.Envoyproxy.Compat != nil {
			al.Index = debugIndex
		}
		srv := al.Server(r.log, r.adminRoutes)
		srv.RegisterOnShutdown(r.dash.Close) // its event streams would hold the shutdown
		if _, err := svc.Listen(lifecycle.Listener{Name: "admin", Addr: addrs.admin, Server: srv, TLS: tlsR,
			Credentials: true, Auth: o.AdminToken != "" || tlsR != nil && tlsR.ClientAuth(),
			Risk: "read the metrics, the configuration and profiles of the process", Note: "(dashboard /dashboard/, /metrics, /config, /rlconfig, /debug/pprof/)"}); err != nil {
			return err
		}
	}
	return nil
}

// healthy is envoyproxy/ratelimit's /healthcheck: serving (not starting or
// draining), the store reached, and, with HealthyWithConfig, a
// configuration with a domain loaded.
func (r *rlsServer) healthy() bool {
	if r.redis != nil && !r.redis.Connected() {
		return false
	}
	if r.opts.Envoyproxy.HealthyWithConfig && len(r.compiler.Limits().Domains()) == 0 {
		return false
	}
	return r.ready.Ready() == nil
}

// configHealth is HealthyWithConfig's part of the gRPC health: the
// service's names NOT_SERVING while no configuration with a domain is
// loaded, as envoyproxy/ratelimit's config health component.
func (r *rlsServer) configHealth() {
	if r.grpc != nil && r.opts.Envoyproxy.HealthyWithConfig {
		r.grpc.SetServing(len(r.compiler.Limits().Domains()) > 0)
	}
}

// connected is portero_store_connected: whether the store has reached
// its backend.
func (r *rlsServer) connected() float64 {
	if r.redis != nil && !r.redis.Connected() {
		return 0
	}
	return 1
}

// readyCheck is the store's part of readiness, as for serve: a Redis
// store that has not answered since the start, under a failure policy
// that can only refuse (deny) or fail (error) every call, makes the
// instance say it is not ready. Under allow and local it serves.
func (r *rlsServer) readyCheck() error {
	if r.redis == nil || r.redis.Connected() {
		return nil
	}
	if p := r.engine.OnError(); p == portero.FailDeny || p == portero.FailError {
		return fmt.Errorf("redis has not answered yet and the failure policy is %s", p)
	}
	return nil
}

// reload reads the configuration again and applies it whole, or logs why
// not and keeps the running one.
func (r *rlsServer) reload(why string) {
	if r.opts.XDS != nil {
		r.log.Info("rls: reload asked: the configuration comes over xDS, nothing to read", "why", why)
		return
	}
	c, err := loadRLSConfig(r.opts.ConfigPath, r.opts.Envoyproxy.load(r.opts.MergeDomains))
	r.apply(why, c, err)
}

// apply applies a configuration read (reload, xDS), or logs why it was
// not and keeps the running one.
func (r *rlsServer) apply(why string, c *descriptor.Config, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loaded(c, err)
	if err != nil {
		r.metrics.reloads.WithLabelValues("error").Inc()
		r.log.Error("rls: reload refused, keeping the running configuration", "why", why, "err", err)
		return
	}
	r.compiler.SetLimits(c)
	r.configHealth()
	r.metrics.setLimits(c)
	r.source.Store(&rlsSource{limits: c, at: time.Now()})
	r.metrics.reloads.WithLabelValues("ok").Inc()
	r.metrics.domains.Set(float64(len(c.Domains())))
	r.log.Info("rls: configuration reloaded", "why", why, "domains", strings.Join(c.Domains(), ","))
}

// adminRoutes adds rls's own admin endpoints: /config, the configuration
// in use, and what envoyproxy/ratelimit's debug port prints, /rlconfig
// and /stats (its DEBUG_PORT is the admin listener).
func (r *rlsServer) adminRoutes(mux *http.ServeMux) {
	mux.Handle("GET /rlconfig", rls.ConfigHandler(r.compiler.Limits))
	mux.Handle("GET /stats", rls.StatsHandler())
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, req *http.Request) {
		src := r.source.Load()
		admin.WriteJSON(w, http.StatusOK, map[string]any{"source": r.opts.ConfigPath, "loaded_at": src.at.UTC().Format(time.RFC3339),
			"files": src.limits.Files(), "domains": src.limits.Domains()})
	})
}

// debugEndpoints are the admin listener's endpoints as
// envoyproxy/ratelimit's debug port lists them at / (its five lines, word
// for word, and Portero's).
var debugEndpoints = []struct{ path, help string }{
	{"/api/version", "print out Portero's build"},
	{"/config", "print out the configuration in use, as JSON"},
	{"/dashboard/", "Portero's dashboard"},
	{"/debug/pprof/", "root of various pprof endpoints. hit for help."},
	{"/debug/pprof/profile", "CPU profiling endpoint"},
	{"/debug/pprof/trace", "trace endpoint"},
	{"/healthz", "Portero's liveness probe"},
	{"/metrics", "Portero's Prometheus metrics"},
	{"/readyz", "Portero's readiness probe"},
	{"/rlconfig", "print out the currently loaded configuration for debugging"},
	{"/stats", "print out stats"},
}

// debugIndex is envoyproxy/ratelimit's debug index: a line "path: help"
// per endpoint, sorted, 200 for any path no endpoint takes.
func debugIndex(w http.ResponseWriter, _ *http.Request) {
	for _, e := range debugEndpoints {
		_, _ = io.WriteString(w, e.path+": "+e.help+"\n")
	}
}

// openRLSStore opens the store RLSOptions name, behind leased budgets
// unless in the compatibility mode or counting each hit as
// envoyproxy/ratelimit does (whose counters, portero.Counter, are its
// own, and whose files carry no budget).
func openRLSStore(o RLSOptions, log *slog.Logger) (portero.Store, error) {
	st, err := openRLSBackend(o, log)
	if err != nil || o.Envoyproxy.Compat != nil || o.Envoyproxy.Counting == engine.CountEach {
		return st, err
	}
	return withBudgets(st, nil, o.Now)
}

// openRLSBackend opens the store RLSOptions name. A Redis that does not
// answer yet is no error: the store fails every call (and the engines'
// failure policies answer) until Redis answers.
func openRLSBackend(o RLSOptions, log *slog.Logger) (portero.Store, error) {
	switch o.Store {
	case "", "memory":
		if o.OnStoreError == portero.FailLocal || o.AuthOnStoreError == portero.FailLocal {
			return nil, &ConfigError{errors.New("failure policy local applies to the redis store only: the memory store does not fail")}
		}
		return memstore.New(memstore.Config{})
	case "redis":
		var tlsCfg *tls.Config
		if o.RedisTLS != nil {
			c, err := o.RedisTLS.Config()
			if err != nil {
				return nil, &ConfigError{err}
			}
			tlsCfg = c
		}
		main, err := openRedis(o.RedisURL, o.RedisTimeout, tlsCfg, log)
		if err != nil || o.RedisPerSecondURL == "" {
			return main, err
		}
		second, err := openRedis(o.RedisPerSecondURL, cmp.Or(o.RedisPerSecondTimeout, o.RedisTimeout), tlsCfg, log)
		if err != nil {
			main.Close(context.Background())
			return nil, err
		}
		return redisstore.NewPerSecond(main, second), nil
	}
	return nil, &ConfigError{fmt.Errorf("store %q: want memory or redis", o.Store)}
}

// openRedis opens a Redis store at url, with tlsCfg when url is TLS.
func openRedis(url string, timeout time.Duration, tlsCfg *tls.Config, log *slog.Logger) (*redisstore.Store, error) {
	c := redisstore.Config{URL: url, Logger: log, DialInBackground: true, Timeout: timeout}
	if strings.HasPrefix(url, "rediss") {
		c.TLS = tlsCfg
	}
	st, err := redisstore.New(c)
	if err != nil {
		return nil, &ConfigError{err}
	}
	return st, nil
}
