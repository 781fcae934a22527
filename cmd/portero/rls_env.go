package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// This file maps envoyproxy/ratelimit's environment (the variables its
// settings package reads, as a Helm chart or a manifest sets them) onto the
// flags of `portero rls`: envoyproxyEnv is a function from the environment
// to flag values, applied to the flags the command line did not set
// (applyEnv). docs/envoy.md lists every variable, honoured or not, and why;
// TestEnvoyproxyEnv holds the table.

// envFlag is one flag value the environment sets, and the variables it
// comes from (for errors and the start-up log).
type envFlag struct{ Flag, Value, From string }

// envNote is a variable Portero does not honour, and why.
type envNote struct{ Var, Why string }

// envoyproxyVars are the variables whose presence means "this deployment is
// configured for envoyproxy/ratelimit" (see envoyproxyEnvSet).
var envoyproxyVars = []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}

// envoyproxyEnvSet reports whether lookup has any of the runtime-directory
// variables that every envoyproxy/ratelimit deployment sets.
func envoyproxyEnvSet(lookup func(string) (string, bool)) bool {
	for _, v := range envoyproxyVars {
		if _, ok := lookup(v); ok {
			return true
		}
	}
	return false
}

// notHonoured are the variables Portero accepts and does not act on, with
// the reason. Setting one is logged at start-up, never an error: none of
// them changes an answer envoyproxy/ratelimit sends.
var notHonoured = map[string]string{}

func init() {
	for why, vars := range map[string][]string{
		"rueidis multiplexes every call over one to four auto-pipelined connections; there is no pool to size": {"REDIS_POOL_SIZE", "REDIS_PERSECOND_POOL_SIZE"},
		"rueidis pipelines automatically (the Redis store's MaxFlushDelay)":                                    {"REDIS_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_WINDOW"},
		"rueidis pipelines automatically":                          {"REDIS_PIPELINE_LIMIT", "REDIS_PERSECOND_PIPELINE_LIMIT"},
		"rueidis sends each cluster node its commands in parallel": {"REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM"},
		"there is no pool":                                         {"REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR"},
		"Portero starts at once and dials Redis in the background (100ms to 2s apart), answering by --on-store-error meanwhile": {
			"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME"},
		"readiness does not follow Redis: while Redis is down the failure policy answers":                       {"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"},
		"Portero always starts, and answers as envoyproxy/ratelimit does with no configuration until one loads": {"FORCE_START_WITHOUT_INITIAL_CONFIG"},
		"Portero's metrics are Prometheus metrics on its admin listener (/metrics, 127.0.0.1:9091 unless --admin-listen), which also serves pprof and the configuration: where to expose it is not the environment's to decide": {
			"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"},
		"applies only with BACKEND_TYPE=memcache, which Portero refuses": {"MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
			"MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"},
		"the xDS stream is retried from XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, doubling with jitter up to XDS_CLIENT_BACKOFF_MAX_INTERVAL": {
			"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR"},
	} {
		for _, v := range vars {
			notHonoured[v] = why
		}
	}
}

// refused are the variables Portero cannot honour and will not run
// without: ignoring them would change what the service connects to or how
// it checks certificates.
var refused = map[string]string{
	"MEMCACHE_HOST_PORT": "Memcache is not supported: use Redis (BACKEND_TYPE=redis, REDIS_URL) or Portero's memory store (portero rls --store memory)",
	"MEMCACHE_SRV":       "Memcache is not supported: use Redis (BACKEND_TYPE=redis, REDIS_URL) or Portero's memory store (portero rls --store memory)",
}

// envoyproxyEnv returns the `portero rls` flags that envoyproxy/ratelimit's
// environment (read through lookup) stands for, with envoyproxy/ratelimit's
// defaults for the variables that are unset, and the variables it does not
// honour. A value it cannot read, or a setting Portero cannot serve, is an
// error naming the variable.
func envoyproxyEnv(lookup func(string) (string, bool)) ([]envFlag, []envNote, error) {
	e := envReader{lookup: lookup}
	var out []envFlag
	set := func(flag, value string, from ...string) {
		out = append(out, envFlag{Flag: flag, Value: value, From: strings.Join(from, ", ")})
	}
	set("compat", "envoyproxy", "RUNTIME_ROOT")

	// The configuration: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY,
	// watched (a symlink swap of the root, or files changing in the
	// directory: Portero's watcher follows both, so RUNTIME_WATCH_ROOT needs
	// no flag).
	root := e.str("RUNTIME_ROOT", "/srv/runtime_data/current")
	sub := e.str("RUNTIME_SUBDIRECTORY", "")
	app := e.str("RUNTIME_APPDIRECTORY", "config")
	e.boolean("RUNTIME_WATCH_ROOT", true)
	if sub == "" {
		// goruntime loads nothing without a subdirectory: envoyproxy/ratelimit
		// then serves with no domains at all.
		set("config", "", "RUNTIME_SUBDIRECTORY")
	} else {
		set("config", filepath.Join(root, sub, app), "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")
	}
	set("watch", "true", "RUNTIME_WATCH_ROOT")
	// The switches, all off by default there.
	for _, b := range [][2]string{{"ignore-dotfiles", "RUNTIME_IGNOREDOTFILES"}, {"merge-domains", "MERGE_DOMAIN_CONFIG"},
		{"stop-increment-over-limit", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, {"shadow-mode", "SHADOW_MODE"},
		{"quota-mode", "QUOTA_MODE"}, {"dynamic-metadata", "RESPONSE_DYNAMIC_METADATA"},
		{"healthy-with-config", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"}} {
		set(b[0], strconv.FormatBool(e.boolean(b[1], false)), b[1])
	}

	listenEnv(&e, set)

	logEnv(&e, set)
	redisEnv(&e, set)
	set("cache-key-prefix", e.str("CACHE_KEY_PREFIX", ""), "CACHE_KEY_PREFIX")
	set("expiration-jitter", (time.Duration(e.integer("EXPIRATION_JITTER_MAX_SECONDS", 300, 0)) * time.Second).String(), "EXPIRATION_JITTER_MAX_SECONDS")
	set("local-cache-size", strconv.FormatInt(e.integer("LOCAL_CACHE_SIZE_IN_BYTES", 0, 0), 10), "LOCAL_CACHE_SIZE_IN_BYTES")
	if near := e.float("NEAR_LIMIT_RATIO", 0.8); near > 0 && near <= 1 {
		set("near-limit-ratio", strconv.FormatFloat(near, 'g', -1, 64), "NEAR_LIMIT_RATIO")
	} else {
		e.fail("NEAR_LIMIT_RATIO", fmt.Errorf("%v: want a share in (0, 1]", near))
	}

	if e.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		set("headers", "envoyproxy", "LIMIT_RESPONSE_HEADERS_ENABLED")
	} else {
		set("headers", "off", "LIMIT_RESPONSE_HEADERS_ENABLED")
	}
	names := []string{e.str("LIMIT_LIMIT_HEADER", "RateLimit-Limit"), e.str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"), e.str("LIMIT_RESET_HEADER", "RateLimit-Reset")}
	for i, n := range names {
		if err := checkHeaderName(n); err != nil {
			e.fail([]string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"}[i], err)
		}
	}
	set("envoyproxy-header-names", strings.Join(names, ","), "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER")
	ecosystemEnv(&e, set)

	for v, why := range refused {
		if x, ok := lookup(v); ok && x != "" {
			e.fail(v, errors.New(why))
		}
	}
	var notes []envNote
	for v, why := range notHonoured {
		if _, ok := lookup(v); ok {
			notes = append(notes, envNote{Var: v, Why: why})
		}
	}
	sort.Slice(notes, func(i, j int) bool { return notes[i].Var < notes[j].Var })
	if len(e.errs) > 0 {
		return nil, notes, errors.Join(e.errs...)
	}
	return out, notes, nil
}

// listenEnv maps the listeners and the gRPC server's settings.
func listenEnv(e *envReader, set func(flag, value string, from ...string)) {
	// Listeners. envoyproxy/ratelimit binds every interface: in a pod,
	// Envoy reaches it from elsewhere. Its debug port (pprof, /rlconfig) is
	// Portero's admin listener (pprof, /rlconfig, /metrics), kept on
	// loopback unless DEBUG_HOST says otherwise.
	set("http-listen", e.hostPort("HOST", "0.0.0.0", "PORT", 8080), "HOST", "PORT")
	if uds := e.str("GRPC_UDS", ""); uds != "" {
		set("grpc-listen", "unix:"+uds, "GRPC_UDS")
	} else {
		set("grpc-listen", e.hostPort("GRPC_HOST", "0.0.0.0", "GRPC_PORT", 8081), "GRPC_HOST", "GRPC_PORT")
	}
	set("admin-listen", e.hostPort("DEBUG_HOST", "127.0.0.1", "DEBUG_PORT", 6070), "DEBUG_HOST", "DEBUG_PORT")
	set("grpc-max-connection-age", e.duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour).String(), "GRPC_MAX_CONNECTION_AGE")
	set("grpc-max-connection-age-grace", e.duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour).String(), "GRPC_MAX_CONNECTION_AGE_GRACE")
	if e.boolean("GRPC_SERVER_USE_TLS", false) {
		cert, key := e.str("GRPC_SERVER_TLS_CERT", ""), e.str("GRPC_SERVER_TLS_KEY", "")
		if cert == "" || key == "" {
			e.fail("GRPC_SERVER_USE_TLS", errors.New("needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"))
		}
		set("grpc-tls-cert", cert, "GRPC_SERVER_TLS_CERT")
		set("grpc-tls-key", key, "GRPC_SERVER_TLS_KEY")
		if ca := e.str("GRPC_CLIENT_TLS_CACERT", ""); ca != "" {
			set("grpc-tls-client-ca", ca, "GRPC_CLIENT_TLS_CACERT")
			if san := e.str("GRPC_CLIENT_TLS_SAN", ""); san != "" {
				set("grpc-tls-client-san", san, "GRPC_CLIENT_TLS_SAN")
			}
		}
	}
}

// logEnv maps the logs' settings.
func logEnv(e *envReader, set func(flag, value string, from ...string)) {
	// Logs: logrus's levels, case-insensitive.
	switch lvl := strings.ToLower(e.str("LOG_LEVEL", "warn")); lvl {
	case "trace", "debug":
		set("log-level", "debug", "LOG_LEVEL")
	case "info":
		set("log-level", "info", "LOG_LEVEL")
	case "warn", "warning":
		set("log-level", "warn", "LOG_LEVEL")
	case "error", "fatal", "panic":
		set("log-level", "error", "LOG_LEVEL")
	default:
		e.fail("LOG_LEVEL", fmt.Errorf("%q: want trace, debug, info, warn, error, fatal or panic", lvl))
	}
	if strings.EqualFold(e.str("LOG_FORMAT", "text"), "json") {
		set("log-format", "json", "LOG_FORMAT")
	} else {
		set("log-format", "text", "LOG_FORMAT")
	}
}

// redisEnv maps the store: Redis (BACKEND_TYPE=redis, the default) at
// REDIS_URL, its timeout and TLS files, and the per-second Redis
// (REDIS_PERSECOND).
func redisEnv(e *envReader, set func(flag, value string, from ...string)) {
	switch b := strings.ToLower(e.str("BACKEND_TYPE", "redis")); b {
	case "redis", "":
	case "memcache":
		e.fail("BACKEND_TYPE", errors.New(`"memcache": Memcache is not supported; use redis, or Portero's memory store (portero rls --store memory)`))
		return
	default:
		e.fail("BACKEND_TYPE", fmt.Errorf("%q: want redis", b))
		return
	}
	useTLS := e.boolean("REDIS_TLS", false)
	u, err := redisURLFromEnv(e.str("REDIS_SOCKET_TYPE", "unix"), e.str("REDIS_TYPE", "SINGLE"),
		e.str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"), e.str("REDIS_AUTH", ""), useTLS, e.str("REDIS_SENTINEL_AUTH", ""))
	if err != nil {
		e.fail("REDIS_URL", err)
	}
	set("store", "redis", "BACKEND_TYPE")
	set("redis-url", u, "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_TLS", "REDIS_SENTINEL_AUTH")
	// Each Redis call waits as long as there; so may a decision (Envoy's
	// filter has its own deadline, 20ms by default).
	rt := e.duration("REDIS_TIMEOUT", 10*time.Second).String()
	set("redis-timeout", rt, "REDIS_TIMEOUT")
	set("call-timeout", rt, "REDIS_TIMEOUT")
	if e.boolean("REDIS_PERSECOND", false) {
		psTLS := e.boolean("REDIS_PERSECOND_TLS", false)
		useTLS = useTLS || psTLS
		u, err := redisURLFromEnv(e.str("REDIS_PERSECOND_SOCKET_TYPE", "unix"), e.str("REDIS_PERSECOND_TYPE", "SINGLE"),
			e.str("REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock"), e.str("REDIS_PERSECOND_AUTH", ""),
			psTLS, e.str("REDIS_PERSECOND_SENTINEL_AUTH", ""))
		if err != nil {
			e.fail("REDIS_PERSECOND_URL", err)
		}
		set("redis-per-second-url", u, "REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL",
			"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH")
		set("redis-per-second-timeout", e.duration("REDIS_PERSECOND_TIMEOUT", 10*time.Second).String(), "REDIS_PERSECOND_TIMEOUT")
	}
	if useTLS {
		// Its TLS files serve both Redis (and their sentinels), as there.
		for flag, v := range map[string]string{"redis-tls-ca": "REDIS_TLS_CACERT", "redis-tls-cert": "REDIS_TLS_CLIENT_CERT", "redis-tls-key": "REDIS_TLS_CLIENT_KEY"} {
			set(flag, e.str(v, ""), v)
		}
		set("redis-tls-skip-hostname-verification", strconv.FormatBool(e.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)), "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
	}
}

// redisURLFromEnv builds the Redis store's URL from envoyproxy/ratelimit's
// REDIS_SOCKET_TYPE (tcp or unix), REDIS_TYPE (single, cluster or
// sentinel), REDIS_URL (host:port or a socket path; host:port,host:port…
// for a cluster; master,host:port,… for sentinels), REDIS_AUTH (password
// or user:password), REDIS_TLS and REDIS_SENTINEL_AUTH.
func redisURLFromEnv(socket, typ, addr, auth string, useTLS bool, sentinelAuth string) (string, error) {
	scheme := "redis"
	if useTLS {
		scheme = "rediss"
	}
	var user *url.Userinfo
	if auth != "" {
		if u, p, ok := strings.Cut(auth, ":"); ok {
			user = url.UserPassword(u, p)
		} else {
			user = url.UserPassword("", auth)
		}
	}
	hosts := strings.Split(addr, ",")
	for i := range hosts {
		hosts[i] = strings.TrimSpace(hosts[i])
	}
	switch strings.ToLower(typ) {
	case "single", "":
		if strings.EqualFold(socket, "unix") {
			if useTLS {
				return "", errors.New("REDIS_TLS over a unix socket is not supported")
			}
			u := url.URL{Scheme: "unix", User: user, Path: addr}
			return u.String(), nil
		}
		if !strings.EqualFold(socket, "tcp") {
			return "", fmt.Errorf("REDIS_SOCKET_TYPE %q: want tcp or unix", socket)
		}
		if len(hosts) != 1 {
			return "", fmt.Errorf("%q: one host:port for REDIS_TYPE single", addr)
		}
		if err := checkHostPort(hosts[0]); err != nil {
			return "", err
		}
		u := url.URL{Scheme: scheme, User: user, Host: hosts[0]}
		return u.String(), nil
	case "cluster":
		for _, h := range hosts {
			if err := checkHostPort(h); err != nil {
				return "", err
			}
		}
		// The Redis store finds a cluster by itself; the other seeds go in
		// rueidis's addr parameters.
		u := url.URL{Scheme: scheme, User: user, Host: hosts[0]}
		q := url.Values{}
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		u.RawQuery = q.Encode()
		return u.String(), nil
	case "sentinel":
		if len(hosts) < 2 || hosts[0] == "" {
			return "", fmt.Errorf("%q: REDIS_TYPE sentinel wants master,host:port[,host:port…]", addr)
		}
		for _, h := range hosts[1:] {
			if err := checkHostPort(h); err != nil {
				return "", err
			}
		}
		s := scheme + "-sentinel://"
		if user != nil {
			s += user.String() + "@"
		}
		s += strings.Join(hosts[1:], ",") + "/" + url.PathEscape(hosts[0])
		if sentinelAuth != "" {
			s += "?" + url.Values{"sentinel_password": {sentinelAuth}}.Encode()
		}
		return s, nil
	}
	return "", fmt.Errorf("REDIS_TYPE %q: want single, cluster or sentinel", typ)
}

func checkHostPort(hp string) error {
	if _, port, err := net.SplitHostPort(hp); err != nil || port == "" {
		return fmt.Errorf("%q: want host:port", hp)
	}
	return nil
}

// envReader reads variables with envconfig's syntax (what
// envoyproxy/ratelimit's settings use) and collects the errors.
type envReader struct {
	lookup func(string) (string, bool)
	errs   []error
}

func (e *envReader) fail(v string, err error) {
	e.errs = append(e.errs, fmt.Errorf("%s: %w", v, err))
}

func (e *envReader) str(v, def string) string {
	if x, ok := e.lookup(v); ok {
		return x
	}
	return def
}

// oneOf reads v, case-insensitive, as one of want (the first is its
// default); another value is an error.
func (e *envReader) oneOf(v string, want ...string) (string, bool) {
	x := strings.ToLower(e.str(v, want[0]))
	if !slices.Contains(want, x) {
		e.fail(v, fmt.Errorf("%q: want %s", x, strings.Join(want, " or ")))
		return "", false
	}
	return x, true
}

// parsed reads v with parse: unset or empty is def, a value parse refuses
// an error saying what it wants.
func parsed[T any](e *envReader, v string, def T, parse func(string) (T, error), want string) T {
	x, ok := e.lookup(v)
	if !ok || x == "" {
		return def
	}
	t, err := parse(x)
	if err != nil {
		e.fail(v, fmt.Errorf("%q: %s", x, want))
		return def
	}
	return t
}

func (e *envReader) boolean(v string, def bool) bool {
	return parsed(e, v, def, strconv.ParseBool, "want true or false")
}

func (e *envReader) integer(v string, def, min int64) int64 {
	return parsed(e, v, def, func(x string) (int64, error) {
		n, err := strconv.ParseInt(x, 0, 64)
		if err == nil && n < min {
			err = errors.New("too small")
		}
		return n, err
	}, fmt.Sprintf("want a whole number from %d", min))
}

func (e *envReader) float(v string, def float64) float64 {
	return parsed(e, v, def, func(x string) (float64, error) { return strconv.ParseFloat(x, 64) }, "want a number")
}

func (e *envReader) duration(v string, def time.Duration) time.Duration {
	return parsed(e, v, def, time.ParseDuration, "want a duration such as 24h or 30m")
}

func (e *envReader) hostPort(hv, hdef, pv string, pdef int64) string {
	host := e.str(hv, hdef)
	port := e.integer(pv, pdef, 0)
	if port > 65535 {
		e.fail(pv, fmt.Errorf("%d: not a port", port))
	}
	return net.JoinHostPort(host, strconv.FormatInt(port, 10))
}

// applyEnv sets every flag of fs that flags names and the command line did
// not set: flags given on the command line win over the environment. It
// returns the flags it set, each with the variables it came from.
func applyEnv(fs *pflag.FlagSet, flags []envFlag) (map[string]string, error) {
	set := map[string]string{}
	for _, f := range flags {
		fl := fs.Lookup(f.Flag)
		if fl == nil {
			return nil, fmt.Errorf("%s: portero rls has no --%s", f.From, f.Flag)
		}
		if fl.Changed {
			continue
		}
		if err := fs.Set(f.Flag, f.Value); err != nil {
			return nil, fmt.Errorf("%s: %w", f.From, err)
		}
		fl.Changed = false // still "not given on the command line"
		set[f.Flag] = f.From
	}
	return set, nil
}

// checkHeaderName refuses what cannot be the name of a header field.
func checkHeaderName(n string) error {
	if n == "" || strings.ContainsAny(n, ", \t\r\n:") {
		return fmt.Errorf("%q is not a header name", n)
	}
	return nil
}
