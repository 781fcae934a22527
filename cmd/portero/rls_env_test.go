package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/portero-rl/portero/store/redisstore"
)

func envOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func flagMap(fs []envFlag) map[string]string {
	m := map[string]string{}
	for _, f := range fs {
		m[f.Flag] = f.Value
	}
	return m
}

// TestEnvoyproxyEnv is the table of envoyproxy/ratelimit's environment
// (as its settings package reads it, with its defaults) against the flags
// of `portero rls` it stands for.
func TestEnvoyproxyEnv(t *testing.T) {
	base := []string{"RUNTIME_ROOT", "/srv/runtime_data/current", "RUNTIME_SUBDIRECTORY", "ratelimit"}
	cases := []struct {
		name string
		env  []string
		want map[string]string
	}{
		{"defaults", base, map[string]string{
			"compat": "envoyproxy", "config": "/srv/runtime_data/current/ratelimit/config", "watch": "true", "ignore-dotfiles": "false",
			"merge-domains": "false", "http-listen": "0.0.0.0:8080", "grpc-listen": "0.0.0.0:8081", "admin-listen": "127.0.0.1:6070",
			"grpc-max-connection-age": "24h0m0s", "grpc-max-connection-age-grace": "1h0m0s", "log-level": "warn", "log-format": "text",
			"store": "redis", "redis-url": "unix:///var/run/nutcracker/ratelimit.sock", "cache-key-prefix": "", "expiration-jitter": "5m0s",
			"stop-increment-over-limit": "false", "shadow-mode": "false", "quota-mode": "false", "dynamic-metadata": "false",
			"healthy-with-config": "false", "headers": "off", "envoyproxy-header-names": "RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset",
			"near-limit-ratio": "0.8", "redis-timeout": "10s", "call-timeout": "10s",
			"statsd": "localhost:8125", "statsd-protocol": "tcp", "statsd-tags": "", "statsd-flush-interval": "10s",
		}},
		{"statsd", append(base, "STATSD_HOST", "statsd.local", "STATSD_PORT", "9125", "STATSD_PROTOCOL", "UDP",
			"EXTRA_TAGS", "cluster:eu,canary:no", "STATS_FLUSH_INTERVAL", "1s"),
			map[string]string{"statsd": "statsd.local:9125", "statsd-protocol": "udp", "statsd-tags": "cluster:eu,canary:no", "statsd-flush-interval": "1s"}},
		{"xds", append(base, "CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL", "eg:18001", "CONFIG_GRPC_XDS_NODE_ID", "rl-0",
			"CONFIG_GRPC_XDS_NODE_METADATA", "a=b", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-token:t", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true",
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/k", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/ca",
			"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "eg.local", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "8388608"),
			map[string]string{"config": "", "xds-server": "eg:18001", "xds-node-id": "rl-0", "xds-node-metadata": "a=b", "xds-headers": "x-token:t",
				"xds-tls": "true", "xds-tls-cert": "/c", "xds-tls-key": "/k", "xds-tls-ca": "/ca", "xds-tls-server-name": "eg.local",
				"xds-retry-initial": "10s", "xds-retry-max": "1m0s", "xds-max-msg-size": "8388608"}},
		{"xds defaults", append(base, "CONFIG_TYPE", "GRPC_XDS_SOTW"),
			map[string]string{"xds-server": "localhost:18000", "xds-node-id": "default", "xds-tls": "<unset>"}},
		{"tracing", append(base, "TRACING_ENABLED", "true", "TRACING_EXPORTER_PROTOCOL", "GRPC", "TRACING_SERVICE_NAME", "rl",
			"TRACING_SERVICE_NAMESPACE", "edge", "TRACING_SERVICE_INSTANCE_ID", "pod-1", "TRACING_SAMPLING_RATE", "0.25"),
			map[string]string{"tracing": "true", "tracing-protocol": "grpc", "tracing-service-name": "rl", "tracing-service-namespace": "edge",
				"tracing-service-instance-id": "pod-1", "tracing-sampling-rate": "0.25"}},
		{"tracing off", base, map[string]string{"tracing": "false", "tracing-protocol": "http", "tracing-service-name": "RateLimit", "tracing-sampling-rate": "1"}},
		{"statsd off", append(base, "USE_STATSD", "false"), map[string]string{"statsd": ""}},
		{"stats disabled", append(base, "DISABLE_STATS", "true"), map[string]string{"statsd": ""}},
		{"dogstatsd", append(base, "USE_STATSD", "false", "USE_DOG_STATSD", "true", "STATSD_HOST", "dd.local",
			"USE_DOG_STATSD_MOGRIFIERS", "hits", "DOG_STATSD_MOGRIFIER_HITS_PATTERN", `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`,
			"DOG_STATSD_MOGRIFIER_HITS_NAME", "ratelimit.service.rate_limit.$3", "DOG_STATSD_MOGRIFIER_HITS_TAGS", "domain:$1,descriptor:$2"),
			map[string]string{"statsd": "dd.local:8125", "dogstatsd": "true",
				"dogstatsd-mogrifier": `{"pattern":"^ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(.*)\\.([^.]+)$","name":"ratelimit.service.rate_limit.$3","tags":{"descriptor":"$2","domain":"$1"}}`}},
		{"mogrifiers without dogstatsd do nothing", append(base, "USE_DOG_STATSD_MOGRIFIERS", "hits"),
			map[string]string{"dogstatsd": "<unset>", "dogstatsd-mogrifier": "<unset>"}},
		{"prometheus instead", append(base, "USE_STATSD", "false", "USE_PROMETHEUS", "true"), map[string]string{"statsd": ""}},
		{"near limit", append(base, "NEAR_LIMIT_RATIO", "0.5"), map[string]string{"near-limit-ratio": "0.5"}},
		{"redis timeout", append(base, "REDIS_TIMEOUT", "250ms"), map[string]string{"redis-timeout": "250ms", "call-timeout": "250ms"}},
		{"no subdirectory: no configuration", []string{"RUNTIME_ROOT", "/data"}, map[string]string{"config": ""}},
		{"app directory", append(base, "RUNTIME_APPDIRECTORY", "limits", "RUNTIME_IGNOREDOTFILES", "true", "MERGE_DOMAIN_CONFIG", "true"),
			map[string]string{"config": "/srv/runtime_data/current/ratelimit/limits", "ignore-dotfiles": "true", "merge-domains": "true"}},
		{"listeners", append(base, "HOST", "127.0.0.1", "PORT", "9080", "GRPC_HOST", "::1", "GRPC_PORT", "9081", "DEBUG_HOST", "0.0.0.0", "DEBUG_PORT", "9070"),
			map[string]string{"http-listen": "127.0.0.1:9080", "grpc-listen": "[::1]:9081", "admin-listen": "0.0.0.0:9070"}},
		{"unix socket", append(base, "GRPC_UDS", "/run/rls.sock"), map[string]string{"grpc-listen": "unix:/run/rls.sock"}},
		{"connection age", append(base, "GRPC_MAX_CONNECTION_AGE", "30m", "GRPC_MAX_CONNECTION_AGE_GRACE", "90s"),
			map[string]string{"grpc-max-connection-age": "30m0s", "grpc-max-connection-age-grace": "1m30s"}},
		{"tls", append(base, "GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "/tls/crt", "GRPC_SERVER_TLS_KEY", "/tls/key",
			"GRPC_CLIENT_TLS_CACERT", "/tls/ca", "GRPC_CLIENT_TLS_SAN", "envoy.local"),
			map[string]string{"grpc-tls-cert": "/tls/crt", "grpc-tls-key": "/tls/key", "grpc-tls-client-ca": "/tls/ca", "grpc-tls-client-san": "envoy.local"}},
		{"tls off ignores the files", append(base, "GRPC_SERVER_TLS_CERT", "/tls/crt"), map[string]string{"grpc-tls-cert": "<unset>"}},
		{"redis tcp", append(base, "REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "redis:6379"), map[string]string{"redis-url": "redis://redis:6379"}},
		{"redis auth tls", append(base, "REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "redis.example:6380", "REDIS_AUTH", "p@ss/word", "REDIS_TLS", "true"),
			map[string]string{"redis-url": "rediss://:p%40ss%2Fword@redis.example:6380"}},
		{"redis user", append(base, "REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "redis:6379", "REDIS_AUTH", "app:secret"),
			map[string]string{"redis-url": "redis://app:secret@redis:6379"}},
		{"redis unix auth", append(base, "REDIS_URL", "/run/redis.sock", "REDIS_AUTH", "secret"),
			map[string]string{"redis-url": "unix://:secret@/run/redis.sock"}},
		{"redis cluster", append(base, "REDIS_SOCKET_TYPE", "tcp", "REDIS_TYPE", "cluster", "REDIS_URL", "a:7000, b:7001,c:7002"),
			map[string]string{"redis-url": "redis://a:7000?addr=b%3A7001&addr=c%3A7002"}},
		{"redis sentinel", append(base, "REDIS_SOCKET_TYPE", "tcp", "REDIS_TYPE", "SENTINEL", "REDIS_URL", "mymaster,s1:26379,s2:26379",
			"REDIS_AUTH", "pw", "REDIS_SENTINEL_AUTH", "spw"),
			map[string]string{"redis-url": "redis-sentinel://:pw@s1:26379,s2:26379/mymaster?sentinel_password=spw"}},
		{"logs", append(base, "LOG_LEVEL", "DEBUG", "LOG_FORMAT", "JSON"), map[string]string{"log-level": "debug", "log-format": "json"}},
		{"log trace", append(base, "LOG_LEVEL", "trace"), map[string]string{"log-level": "debug"}},
		{"log fatal", append(base, "LOG_LEVEL", "fatal"), map[string]string{"log-level": "error"}},
		{"answers", append(base, "SHADOW_MODE", "true", "QUOTA_MODE", "1", "RESPONSE_DYNAMIC_METADATA", "TRUE",
			"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "t", "CACHE_KEY_PREFIX", "rl:", "EXPIRATION_JITTER_MAX_SECONDS", "0",
			"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
			map[string]string{"shadow-mode": "true", "quota-mode": "true", "dynamic-metadata": "true", "stop-increment-over-limit": "true",
				"cache-key-prefix": "rl:", "expiration-jitter": "0s", "healthy-with-config": "true"}},
		{"headers", append(base, "LIMIT_RESPONSE_HEADERS_ENABLED", "true", "LIMIT_LIMIT_HEADER", "X-Limit", "LIMIT_REMAINING_HEADER", "X-Left",
			"LIMIT_RESET_HEADER", "X-Reset"),
			map[string]string{"headers": "envoyproxy", "envoyproxy-header-names": "X-Limit,X-Left,X-Reset"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _, err := envoyproxyEnv(envOf(c.env...))
			if err != nil {
				t.Fatalf("envoyproxyEnv(%v) error: %v", c.env, err)
			}
			m := flagMap(got)
			for flag, want := range c.want {
				v, ok := m[flag]
				if !ok {
					v = "<unset>"
				}
				if v != want {
					t.Errorf("envoyproxyEnv(%v) --%s = %q, want %q", c.env, flag, v, want)
				}
			}
			// Every Redis URL built is one the Redis store accepts.
			if u, ok := m["redis-url"]; ok {
				st, err := redisstore.New(redisstore.Config{URL: u, DialInBackground: true})
				if err != nil {
					t.Errorf("redisstore.New(%q): %v", u, err)
				} else {
					st.Close(context.Background())
				}
			}
		})
	}
}

// TestEnvoyproxyEnvErrors: values envoyproxy/ratelimit would not read, and
// settings Portero cannot serve, are errors naming the variable.
func TestEnvoyproxyEnvErrors(t *testing.T) {
	base := []string{"RUNTIME_ROOT", "/srv/rt", "RUNTIME_SUBDIRECTORY", "ratelimit"}
	cases := []struct {
		env  []string
		want string
	}{
		{[]string{"LOG_LEVEL", "verbose"}, "LOG_LEVEL"},
		{[]string{"SHADOW_MODE", "maybe"}, "SHADOW_MODE"},
		{[]string{"PORT", "99999"}, "PORT"},
		{[]string{"GRPC_PORT", "http"}, "GRPC_PORT"},
		{[]string{"GRPC_MAX_CONNECTION_AGE", "1 day"}, "GRPC_MAX_CONNECTION_AGE"},
		{[]string{"EXPIRATION_JITTER_MAX_SECONDS", "-1"}, "EXPIRATION_JITTER_MAX_SECONDS"},
		{[]string{"NEAR_LIMIT_RATIO", "1.5"}, "NEAR_LIMIT_RATIO"},
		{[]string{"REDIS_TIMEOUT", "ten"}, "REDIS_TIMEOUT"},
		{[]string{"BACKEND_TYPE", "memcache"}, "Memcache is not supported"},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_DELTA"}, "CONFIG_TYPE"},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x"}, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "soon"}, "XDS_CLIENT_BACKOFF_MAX_INTERVAL"},
		{[]string{"LOCAL_CACHE_SIZE_IN_BYTES", "-1"}, "LOCAL_CACHE_SIZE_IN_BYTES"},
		{[]string{"REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "nohostport"}, "REDIS_PERSECOND_URL"},
		{[]string{"REDIS_PERSECOND", "true", "REDIS_PERSECOND_TIMEOUT", "soon"}, "REDIS_PERSECOND_TIMEOUT"},
		{[]string{"MEMCACHE_HOST_PORT", "m:11211"}, "use Redis"},
		{[]string{"GRPC_SERVER_USE_TLS", "true"}, "GRPC_SERVER_TLS_CERT"},
		{[]string{"REDIS_TYPE", "ring"}, "REDIS_TYPE"},
		{[]string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "nohostport"}, "host:port"},
		{[]string{"REDIS_TYPE", "sentinel", "REDIS_URL", "onlymaster"}, "master,host:port"},
		{[]string{"LIMIT_RESPONSE_HEADERS_ENABLED", "true", "LIMIT_RESET_HEADER", "Bad Name"}, "LIMIT_RESET_HEADER"},
		{[]string{"STATSD_PROTOCOL", "sctp"}, "STATSD_PROTOCOL"},
		{[]string{"TRACING_EXPORTER_PROTOCOL", "zipkin"}, "TRACING_EXPORTER_PROTOCOL"},
		{[]string{"TRACING_SAMPLING_RATE", "half"}, "TRACING_SAMPLING_RATE"},
		{[]string{"STATSD_PORT", "x"}, "STATSD_PORT"},
		{[]string{"EXTRA_TAGS", "nocolon"}, "EXTRA_TAGS"},
		{[]string{"STATS_FLUSH_INTERVAL", "often"}, "STATS_FLUSH_INTERVAL"},
		{[]string{"USE_PROMETHEUS", "true"}, "one of USE_STATSD"},
		{[]string{"USE_DOG_STATSD", "true"}, "one of USE_STATSD"},
		{[]string{"USE_STATSD", "false", "USE_DOG_STATSD", "true", "USE_DOG_STATSD_MOGRIFIERS", "A", "DOG_STATSD_MOGRIFIER_A_NAME", "x"}, "DOG_STATSD_MOGRIFIER_A_*: mogrifier A: no pattern"},
		{[]string{"USE_STATSD", "false", "USE_DOG_STATSD", "true", "USE_DOG_STATSD_MOGRIFIERS", "A", "DOG_STATSD_MOGRIFIER_A_PATTERN", "(", "DOG_STATSD_MOGRIFIER_A_NAME", "x"}, "DOG_STATSD_MOGRIFIER_A_*"},
		{[]string{"USE_STATSD", "false", "USE_DOG_STATSD", "true", "USE_DOG_STATSD_MOGRIFIERS", "A", "DOG_STATSD_MOGRIFIER_A_PATTERN", "a", "DOG_STATSD_MOGRIFIER_A_NAME", "x", "DOG_STATSD_MOGRIFIER_A_TAGS", "nocolon"}, "DOG_STATSD_MOGRIFIER_A_TAGS"},
	}
	for _, c := range cases {
		env := append(append([]string{}, base...), c.env...)
		_, _, err := envoyproxyEnv(envOf(env...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("envoyproxyEnv(%v) error = %v, want one mentioning %q", c.env, err, c.want)
		}
	}
}

// TestEnvoyproxyEnvNotHonoured: a variable Portero does not act on is
// reported with its reason, and is no error.
func TestEnvoyproxyEnvNotHonoured(t *testing.T) {
	_, notes, err := envoyproxyEnv(envOf("RUNTIME_SUBDIRECTORY", "rl", "REDIS_POOL_SIZE", "20", "USE_STATSD", "false", "USE_PROMETHEUS", "true", "REDIS_PERSECOND_POOL_SIZE", "5"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range notes {
		if n.Why == "" {
			t.Errorf("%s: no reason given", n.Var)
		}
		got = append(got, n.Var)
	}
	if want := "REDIS_PERSECOND_POOL_SIZE,REDIS_POOL_SIZE,USE_PROMETHEUS"; strings.Join(got, ",") != want {
		t.Errorf("notes = %v, want %s", got, want)
	}
}

// envoyproxyVariables are every variable envoyproxy/ratelimit's settings
// read (src/settings/settings.go, as of its commit f2fb157, July 2026), and
// STATSD_PROTOCOL, which its statsd library (lyft/gostats) reads.
var envoyproxyVariables = strings.Fields(`BACKEND_TYPE CACHE_KEY_PREFIX CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS
CONFIG_GRPC_XDS_CLIENT_TLS_CERT CONFIG_GRPC_XDS_CLIENT_TLS_KEY CONFIG_GRPC_XDS_NODE_ID CONFIG_GRPC_XDS_NODE_METADATA
CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL CONFIG_GRPC_XDS_SERVER_TLS_CACERT CONFIG_GRPC_XDS_SERVER_TLS_SAN
CONFIG_GRPC_XDS_SERVER_URL CONFIG_GRPC_XDS_SERVER_USE_TLS CONFIG_TYPE DEBUG_HOST DEBUG_PORT DISABLE_STATS
EXPIRATION_JITTER_MAX_SECONDS EXTRA_TAGS FORCE_START_WITHOUT_INITIAL_CONFIG GRPC_CLIENT_TLS_CACERT GRPC_CLIENT_TLS_SAN
GRPC_HOST GRPC_MAX_CONNECTION_AGE GRPC_MAX_CONNECTION_AGE_GRACE GRPC_PORT GRPC_SERVER_TLS_CERT GRPC_SERVER_TLS_KEY
GRPC_SERVER_USE_TLS GRPC_UDS HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED HOST LIMIT_LIMIT_HEADER LIMIT_REMAINING_HEADER
LIMIT_RESET_HEADER LIMIT_RESPONSE_HEADERS_ENABLED LOCAL_CACHE_SIZE_IN_BYTES LOG_FORMAT LOG_LEVEL MEMCACHE_HOST_PORT
MEMCACHE_MAX_IDLE_CONNS MEMCACHE_SRV MEMCACHE_SRV_REFRESH MEMCACHE_TLS MEMCACHE_TLS_CACERT MEMCACHE_TLS_CLIENT_CERT
MEMCACHE_TLS_CLIENT_KEY MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION MERGE_DOMAIN_CONFIG NEAR_LIMIT_RATIO PORT PROMETHEUS_ADDR
PROMETHEUS_MAPPER_YAML PROMETHEUS_PATH PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS QUOTA_MODE REDIS_AUTH
REDIS_CLUSTER_PIPELINE_PARALLELISM REDIS_HEALTH_CHECK_ACTIVE_CONNECTION REDIS_PERSECOND REDIS_PERSECOND_AUTH
REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM REDIS_PERSECOND_PIPELINE_LIMIT REDIS_PERSECOND_PIPELINE_WINDOW
REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR REDIS_PERSECOND_POOL_SIZE REDIS_PERSECOND_SENTINEL_AUTH REDIS_PERSECOND_SOCKET_TYPE
REDIS_PERSECOND_TIMEOUT REDIS_PERSECOND_TLS REDIS_PERSECOND_TYPE REDIS_PERSECOND_URL REDIS_PIPELINE_LIMIT
REDIS_PIPELINE_WINDOW REDIS_POOL_ON_EMPTY_BEHAVIOR REDIS_POOL_SIZE REDIS_SENTINEL_AUTH REDIS_SOCKET_TYPE
REDIS_STARTUP_INITIAL_INTERVAL REDIS_STARTUP_MAX_ELAPSED_TIME REDIS_STARTUP_MAX_INTERVAL REDIS_TIMEOUT REDIS_TLS
REDIS_TLS_CACERT REDIS_TLS_CLIENT_CERT REDIS_TLS_CLIENT_KEY REDIS_TLS_SKIP_HOSTNAME_VERIFICATION REDIS_TYPE REDIS_URL
RESPONSE_DYNAMIC_METADATA RUNTIME_APPDIRECTORY RUNTIME_IGNOREDOTFILES RUNTIME_ROOT RUNTIME_SUBDIRECTORY RUNTIME_WATCH_ROOT
SHADOW_MODE STATSD_HOST STATSD_PORT STATSD_PROTOCOL STATS_FLUSH_INTERVAL STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT TRACING_ENABLED
TRACING_EXPORTER_PROTOCOL TRACING_SAMPLING_RATE TRACING_SERVICE_INSTANCE_ID TRACING_SERVICE_NAME TRACING_SERVICE_NAMESPACE
USE_DOG_STATSD USE_DOG_STATSD_MOGRIFIERS USE_PROMETHEUS USE_STATSD XDS_CLIENT_BACKOFF_INITIAL_INTERVAL
XDS_CLIENT_BACKOFF_JITTER XDS_CLIENT_BACKOFF_MAX_INTERVAL XDS_CLIENT_BACKOFF_RANDOM_FACTOR XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`)

// TestEnvoyproxyEnvComplete: every variable of envoyproxy/ratelimit is
// read by envoyproxyEnv (honoured, logged as not honoured, or refused) and
// named in docs/envoy.md, alone or in a group written PREFIX* there.
func TestEnvoyproxyEnvComplete(t *testing.T) {
	asked := map[string]bool{}
	env := envOf("RUNTIME_ROOT", "/srv/rt", "RUNTIME_SUBDIRECTORY", "ratelimit", "GRPC_SERVER_USE_TLS", "true",
		"GRPC_SERVER_TLS_CERT", "/c", "GRPC_SERVER_TLS_KEY", "/k", "GRPC_CLIENT_TLS_CACERT", "/ca",
		"CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", // the xDS settings are read with xDS on
		"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "r:6379", "REDIS_TLS", "true", // the TLS files with TLS on
		"REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", "r2:6379") // its Redis with it on
	if _, _, err := envoyproxyEnv(func(k string) (string, bool) { asked[k] = true; return env(k) }); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	groups := regexp.MustCompile("`([A-Z][A-Z_]*)\\*`").FindAllStringSubmatch(string(doc), -1)
	for _, v := range envoyproxyVariables {
		if !asked[v] {
			t.Errorf("%s: envoyproxyEnv neither honours it nor reports it", v)
		}
		documented := regexp.MustCompile(`\b` + v + `\b`).Match(doc)
		for _, g := range groups {
			documented = documented || strings.HasPrefix(v, g[1])
		}
		if !documented {
			t.Errorf("%s: docs/envoy.md does not say whether it is honoured", v)
		}
	}
}
