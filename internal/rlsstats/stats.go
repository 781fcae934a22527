// Package rlsstats sends `portero rls`'s statistics as envoyproxy/ratelimit
// sends them: statsd (or DogStatsD) counters, gauges and timers with its names
// (ratelimit.service.rate_limit.DOMAIN.KEY.total_hits, …), its values (the
// hits split into within, near and over the limit as its limiter splits
// them), its tags (EXTRA_TAGS) and its flush interval, so that a
// statsd_exporter mapping, a dashboard or an alert written for it reads
// Portero the same. It is fed by the decisions (Observer, a
// descriptor.Observer) and by the configuration loads (Loaded).
//
// It is built on github.com/lyft/gostats, the library envoyproxy/ratelimit
// itself uses: the store, the scopes and the tag serialization
// (name.__tag=value), counters flushed as the difference since the last
// flush and only when not zero, gauges at every flush, timers one line per
// sample, and its network sink (lines "name:value|c", "|g", "|ms" packed
// into 1432-byte UDP datagrams or a TCP stream, reconnecting). Writing the
// protocol again would only risk differing in one of those details. A
// counter is an atomic add: a decision takes no lock and allocates nothing
// here but for a detailed_metric, value_to_metric or override key seen for
// the first time; a timer sample is written to the sink's buffer under its
// lock, as there. The sink's goroutine lives as long as the process
// (gostats has no Close), which runs one `portero rls`.
package rlsstats

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gostats "github.com/lyft/gostats"

	"github.com/portero-rl/portero/descriptor"
)

// Defaults of Options, as envoyproxy/ratelimit's.
const (
	DefaultFlushInterval = 10 * time.Second
	DefaultMaxKeys       = 1000
)

// Options configure Stats.
type Options struct {
	// Addr is the statsd server, host:port (STATSD_HOST, STATSD_PORT);
	// Protocol is tcp (gostats's default, as there) or udp
	// (STATSD_PROTOCOL).
	Addr, Protocol string
	// DogStatsd sends DogStatsD over UDP instead (USE_DOG_STATSD): tags as
	// DogStatsD tags, names rewritten by Mogrifiers
	// (USE_DOG_STATSD_MOGRIFIERS); Protocol is then unused.
	DogStatsd  bool
	Mogrifiers []Mogrifier
	// Tags are added to every statistic (EXTRA_TAGS).
	Tags map[string]string
	// FlushInterval is how often counters and gauges are sent
	// (STATS_FLUSH_INTERVAL; 0: DefaultFlushInterval).
	FlushInterval time.Duration
	// NearLimitRatio is NEAR_LIMIT_RATIO (0: 0.8).
	NearLimitRatio float64
	// CountEach says the engine counts as envoyproxy/ratelimit does
	// (engine.CountEach): each descriptor's counter then splits its hits
	// exactly as there. Otherwise a descriptor's hits go whole to the
	// outcome the engine decided.
	CountEach bool
	// Limits returns the configuration in use (to tell unknown domains).
	Limits func() *descriptor.Config
	// MaxKeys caps the keys the requests' values add (detailed_metric,
	// value_to_metric, overrides, unknown domains); past it a decision is
	// counted under its limit's configured key (0: DefaultMaxKeys).
	MaxKeys int
	// Logger receives the sink's connection errors (nil: slog.Default()).
	Logger *slog.Logger

	// sink replaces the network sink (tests).
	sink gostats.Sink
}

// Stats is one process's statistics.
type Stats struct {
	opts  Options
	store gostats.Store
	near  float32

	rateLimit gostats.Scope // ratelimit.service.rate_limit
	service   serviceStats
	server    serverStats
	runtime   runtimeStats

	byLimit   sync.Map // *descriptor.Limit → *limitKey, cleared on reload
	byName    sync.Map // sanitized key → *limitStats
	notFounds sync.Map // unknown domain → its domain_not_found
	nKeys     atomic.Int64
}

type serviceStats struct {
	configLoadSuccess, configLoadError, globalShadowMode gostats.Counter
	redisError, serviceError                             gostats.Counter
}

type serverStats struct {
	totalRequests gostats.Counter
	responseTime  gostats.Timer
}

type runtimeStats struct {
	loadAttempts gostats.Counter
	numValues    gostats.Gauge
}

// New returns the statistics o describes; Run sends them.
func New(o Options) (*Stats, error) {
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.NearLimitRatio <= 0 {
		o.NearLimitRatio = 0.8
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Limits == nil {
		o.Limits = func() *descriptor.Config { return nil }
	}
	sink := o.sink
	if sink == nil {
		var err error
		if sink, err = newSink(o); err != nil {
			return nil, err
		}
	}
	s := &Stats{opts: o, store: gostats.NewStore(sink, false), near: float32(o.NearLimitRatio)}
	// The scopes of envoyproxy/ratelimit's stats manager, server and
	// gRPC reporter (src/stats/manager_impl.go, src/server/server_impl.go,
	// src/service_cmd/runner/runner.go).
	svc := s.store.ScopeWithTags("ratelimit", o.Tags).Scope("service")
	s.rateLimit = svc.Scope("rate_limit")
	call := svc.Scope("call.should_rate_limit")
	s.service = serviceStats{
		configLoadSuccess: svc.NewCounter("config_load_success"), configLoadError: svc.NewCounter("config_load_error"),
		globalShadowMode: svc.NewCounter("global_shadow_mode"),
		redisError:       call.NewCounter("redis_error"), serviceError: call.NewCounter("service_error"),
	}
	srv := s.store.ScopeWithTags("ratelimit_server", o.Tags)
	s.server = serverStats{totalRequests: srv.NewCounter("ShouldRateLimit.total_requests"), responseTime: srv.NewTimer("ShouldRateLimit.response_time")}
	s.store.AddStatGenerator(gostats.NewRuntimeStats(s.store.ScopeWithTags("ratelimit", o.Tags).Scope("go")))
	rt := s.store.ScopeWithTags("runtime", o.Tags)
	s.runtime = runtimeStats{loadAttempts: rt.NewCounter("load_attempts"), numValues: rt.NewGauge("num_values")}
	return s, nil
}

// newSink returns gostats's network sink to o.Addr, or DataDog's.
func newSink(o Options) (sink gostats.Sink, err error) {
	if o.DogStatsd {
		return newDogSink(o.Addr, o.Mogrifiers)
	}
	host, p, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("statsd address %q: %w", o.Addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return nil, fmt.Errorf("statsd address %q: bad port", o.Addr)
	}
	switch o.Protocol {
	case "":
		o.Protocol = "tcp"
	case "tcp", "udp", "tcp4", "tcp6", "udp4", "udp6":
	default:
		return nil, fmt.Errorf("statsd protocol %q: want tcp or udp", o.Protocol)
	}
	// gostats reads its defaults from the environment first and panics on
	// a value it cannot read there (STATSD_PORT=x); every one it reads is
	// then replaced by an option.
	defer func() {
		if r := recover(); r != nil {
			sink, err = nil, fmt.Errorf("statsd: %v", r)
		}
	}()
	return gostats.NewNetSink(gostats.WithStatsdHost(host), gostats.WithStatsdPort(port), gostats.WithStatsdProtocol(o.Protocol),
		gostats.WithLogger(&sinkLogger{log: o.Logger})), nil
}

// sinkLogger passes the sink's messages to slog: the first connection
// error as a warning, the retries (every 3 s while statsd is away) at
// debug level.
type sinkLogger struct {
	log    *slog.Logger
	warned atomic.Bool
}

func (l *sinkLogger) Errorf(msg string, args ...any) {
	l.log.Error("rls: statsd: " + fmt.Sprintf(msg, args...))
}

func (l *sinkLogger) Warnf(msg string, args ...any) {
	lvl := slog.LevelDebug
	if !l.warned.Swap(true) {
		lvl = slog.LevelWarn
	}
	l.log.Log(context.Background(), lvl, "rls: statsd: "+fmt.Sprintf(msg, args...))
}

// Run flushes every FlushInterval until ctx is done, then once more.
func (s *Stats) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.FlushInterval)
	defer t.Stop()
	s.store.StartContext(ctx, t)
}

// Flush sends what changed since the last flush.
func (s *Stats) Flush() { s.store.Flush() }

// Loaded counts one load of the configuration: config_load_success or
// config_load_error and, for files (fromFiles), its runtime loader's
// load_attempts and num_values (the files read).
func (s *Stats) Loaded(c *descriptor.Config, err error, fromFiles bool) {
	if fromFiles {
		s.runtime.loadAttempts.Inc()
	}
	if err != nil {
		s.service.configLoadError.Inc()
		return
	}
	s.service.configLoadSuccess.Inc()
	if fromFiles {
		s.runtime.numValues.Set(uint64(len(c.Files())))
	}
	s.byLimit.Clear()
}
