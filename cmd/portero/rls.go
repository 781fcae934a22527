package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/lifecycle"
	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/tlsreload"
	"github.com/portero-rl/portero/store/redisstore"
)

// rlsFlags are the options of `portero rls`.
type rlsFlags struct {
	config, grpcListen, httpListen, adminListen  string
	logs                                         logFlags
	store, redisURL                              string
	onStoreError, authOnStoreError, defaultDom   string
	localShare, nearLimit                        float64
	maxDetailed                                  int
	trusted, ipHeader                            string
	adminTokenEnv                                string
	httpTLS, adminTLS                            tlsFlags
	mergeDomains, allowUnknown, watch, noHeaders bool
	callTimeout, grace, drain, redisTimeout      time.Duration
	settle                                       time.Duration
	transport                                    *transportFlags
	compat                                       compatFlags
	ecosystem                                    ecosystemFlags
	redis                                        redisFlags
	ignoredArgs                                  []string // run as ratelimit, the arguments that are no flags
}

// tlsFlags are one listener's --NAME-tls-cert, -key and -client-ca.
type tlsFlags struct {
	prefix string
	files  tlsreload.Files
}

func (t *tlsFlags) add(cmd *cobra.Command, name, what string) {
	fl := cmd.Flags()
	t.prefix = "--" + name + "-tls-"
	fl.StringVar(&t.files.CertFile, name+"-tls-cert", "", "PEM certificate chain: serve TLS on the "+what+" listener (reloaded when the file changes)")
	fl.StringVar(&t.files.KeyFile, name+"-tls-key", "", "PEM private key of --"+name+"-tls-cert")
	fl.StringVar(&t.files.ClientCAFile, name+"-tls-client-ca", "", "PEM CA certificates: require client certificates they signed on the "+what+" listener")
}

// check loads the files once, so that a bad one is a usage error naming
// its flag before anything listens.
func (t *tlsFlags) check() error {
	if !t.files.Enabled() {
		return nil
	}
	if _, err := tlsreload.Load(t.files); err != nil {
		var fe *tlsreload.FileError
		if errors.As(err, &fe) {
			flag := map[string]string{tlsreload.FieldCert: "cert", tlsreload.FieldKey: "key", tlsreload.FieldClientCA: "client-ca"}[fe.Field]
			return fmt.Errorf("%s%s: %w", t.prefix, flag, err)
		}
		return err
	}
	return nil
}

func newRLSCmd() *cobra.Command {
	cmd, _ := rlsCommand()
	return cmd
}

// rlsCommand is `portero rls` and the flags it fills.
func rlsCommand() (*cobra.Command, *rlsFlags) {
	var f rlsFlags
	cmd := &cobra.Command{
		Use:   "rls",
		Short: "Run the decision service: Envoy's rate limit service (gRPC) and the HTTP check API",
		Long: `rls runs Portero as a decision service for proxies:

  gRPC   envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, a drop-in
         for envoyproxy/ratelimit reading the same YAML (--config, a file or a
         directory of *.yaml files), plus the gRPC health service and server
         reflection; TLS and mTLS with --grpc-tls-*;
  HTTP   POST /v1/check (JSON decisions), /v1/auth (nginx auth_request,
         Traefik forwardAuth), /healthz and /readyz;
  admin  /metrics (Prometheus: decisions per domain and descriptor key),
         /config, /api/version, /debug/pprof/, /healthz and /readyz.

All descriptors of one request are decided all-or-nothing: a refused request
counts against no limit. Limits are envoyproxy/ratelimit's clock-aligned fixed
windows unless a descriptor's rate_limit.portero picks another algorithm.

Every listener binds loopback by default (gRPC 127.0.0.1:8081, HTTP
127.0.0.1:8082, admin 127.0.0.1:9091, clear of serve's 8080 and 9090).
Bound elsewhere without TLS (--grpc-tls-*, --http-tls-*; for the admin
listener a token, --admin-token-env, or a client CA), anyone who reaches a
listener can spend any client's limits or read the metrics, and a warning
says so. Certificate files are read again when they change. gRPC runs on
grpc-go with connection caps, timeouts and keepalive enforcement
(--grpc-*); --grpc-transport lean is a faster server for loopback and unix
sockets only.

It reloads the configuration on SIGHUP (and with --watch when a file
changes, a Kubernetes ConfigMap or a runtime directory's symlink swap
included, once the files have settled; a bad file is refused and the running
configuration kept). On SIGTERM or Ctrl-C it drains as serve does: /readyz
answers 503 and gRPC health NOT_SERVING for --drain-period (when something
has asked /readyz since the start; a second signal ends it), then calls in
flight get --grace to finish.`,
		Example: `  portero rls --config examples/envoy/config
  portero rls --config /srv/runtime_data/current/ratelimit/config --store redis --redis-url redis://localhost:6379
  portero rls --config limits.yaml --grpc-listen 10.0.0.5:8081 --http-listen off`,
		// envoyproxy/ratelimit ignores its arguments: run as ratelimit,
		// so does rls (a compose file's command: /bin/ratelimit gives
		// ratelimit /bin/ratelimit). Flags are still read.
		Args: func(cmd *cobra.Command, args []string) error {
			if f.compat.env {
				return nil
			}
			return cobra.NoArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applyEnvoyproxyEnv(cmd, &f.compat, os.LookupEnv); err != nil {
				return err
			}
			f.ignoredArgs = args
			return runRLS(cmd.Context(), cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "envoyproxy/ratelimit YAML: a file or a directory of *.yaml/*.yml files (required)")
	fl.StringVar(&f.grpcListen, "grpc-listen", server.DefaultRLSGRPCListen, "gRPC address for Envoy: host:port, unix:PATH, or off; loopback unless told otherwise")
	f.transport = addTransportFlags(fl)
	fl.StringVar(&f.httpListen, "http-listen", server.DefaultRLSHTTPListen, "HTTP address for /v1/check and /v1/auth (off to disable); loopback unless told otherwise")
	fl.StringVar(&f.adminListen, "admin-listen", server.DefaultRLSAdminListen, "admin address: /metrics, /config, /debug/pprof/ (off to disable); loopback unless told otherwise")
	fl.StringVar(&f.adminTokenEnv, "admin-token-env", "", "name of an environment variable holding the bearer token the admin listener requires")
	f.httpTLS.add(cmd, "http", "HTTP")
	f.adminTLS.add(cmd, "admin", "admin")
	fl.StringVar(&f.store, "store", "memory", "where counters live: memory or redis")
	fl.StringVar(&f.redisURL, "redis-url", "redis://127.0.0.1:6379", "Redis with --store redis: redis://host:port[/db], rediss:// for TLS, or redis-sentinel://host:port[,host:port…]/master")
	fl.StringVar(&f.onStoreError, "on-store-error", "error", "failure policy of gRPC and /v1/check when the store fails: error (gRPC UNAVAILABLE, so that Envoy's failure_mode_deny decides; 503), allow, deny (OVER_LIMIT) or local (a share of each limit in this instance's memory, --store redis)")
	fl.StringVar(&f.authOnStoreError, "auth-on-store-error", "allow", "failure policy of /v1/auth when the store fails: allow (200), deny (the deny status), local or error (503)")
	fl.Float64Var(&f.localShare, "local-share", 1, "with local: the share of each limit one instance admits from memory while the store fails, in (0, 1]")
	fl.Float64Var(&f.nearLimit, "near-limit-ratio", engine.DefaultNearLimit, "share of a limit used from which an admitted descriptor counts as near-limit in the metrics (envoyproxy/ratelimit's NEAR_LIMIT_RATIO), in (0, 1]")
	fl.IntVar(&f.maxDetailed, "max-detailed-metrics", server.DefaultMaxDetailedSeries, "most metric series detailed_metric descriptors add, one per distinct value; more values are counted under the descriptor's key")
	fl.StringVar(&f.defaultDom, "auth-domain", "", "domain of /v1/auth requests that name none")
	fl.StringVar(&f.trusted, "trusted-proxies", "127.0.0.0/8,::1/128", "comma-separated networks whose forwarding headers /v1/auth believes")
	fl.StringVar(&f.ipHeader, "client-ip-header", "X-Forwarded-For", "the one forwarding header /v1/auth reads the client address from")
	fl.BoolVar(&f.mergeDomains, "merge-domains", false, "let several files add to one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
	fl.BoolVar(&f.allowUnknown, "allow-unknown-domains", false, "answer OK for unconfigured domains, as envoyproxy/ratelimit does (default: NOT_FOUND)")
	fl.BoolVar(&f.watch, "watch", false, "reload when a configuration file changes (file notifications, and a poll every 2s for symlink swaps)")
	addWatchSettle(fl, &f.settle)
	fl.BoolVar(&f.noHeaders, "no-headers", false, "do not send RateLimit, RateLimit-Policy and Retry-After in response_headers_to_add")
	fl.DurationVar(&f.callTimeout, "call-timeout", time.Second, "longest time one decision may take when the caller's deadline is later")
	fl.DurationVar(&f.redisTimeout, "redis-timeout", redisstore.DefaultTimeout, "with --store redis, longest time one Redis call may take (envoyproxy/ratelimit's REDIS_TIMEOUT)")
	f.redis.add(fl)
	fl.DurationVar(&f.drain, "drain-period", config.DefaultDrainPeriod, "on SIGTERM, how long /readyz answers 503 (and gRPC health NOT_SERVING) before the listeners close (0 for none)")
	fl.DurationVar(&f.grace, "grace", server.DefaultRLSShutdownTimeout, "how long in-flight calls may finish on shutdown")
	f.compat.add(fl)
	f.ecosystem.add(fl)
	f.logs.add(cmd)
	return cmd, &f
}

func runRLS(ctx context.Context, cmd *cobra.Command, f rlsFlags) error {
	logger, err := f.logs.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	for _, n := range f.compat.notes {
		logger.Info("rls: envoyproxy/ratelimit setting not honoured", "var", n.Var, "why", n.Why)
	}
	if len(f.ignoredArgs) > 0 {
		logger.Info("rls: arguments ignored, as envoyproxy/ratelimit ignores them", "args", strings.Join(f.ignoredArgs, " "))
	}
	if f.config == "" && !f.compat.env && f.ecosystem.xdsServer == "" {
		return usageErr(errors.New("--config is required: an envoyproxy/ratelimit YAML file or directory"))
	}
	envoyproxy, noHeaders, err := f.compat.options(f.noHeaders)
	if err != nil {
		return usageErr(err)
	}
	onErr, err := portero.ParseFailurePolicy(f.onStoreError)
	if err != nil {
		return usageErr(fmt.Errorf("--on-store-error: %w", err))
	}
	authOnErr, err := portero.ParseFailurePolicy(f.authOnStoreError)
	if err != nil {
		return usageErr(fmt.Errorf("--auth-on-store-error: %w", err))
	}
	if (onErr == portero.FailLocal || authOnErr == portero.FailLocal) && f.store != "redis" {
		return usageErr(errors.New("failure policy local applies to --store redis only: the memory store does not fail"))
	}
	trusted, err := clientip.ParsePrefixes(splitList(f.trusted))
	if err != nil {
		return usageErr(fmt.Errorf("--trusted-proxies: %w", err))
	}
	grpcOpts, err := f.transport.options(f.grace)
	if err != nil {
		return usageErr(err)
	}
	// envoyproxy/ratelimit matches GRPC_CLIENT_TLS_SAN as a host name.
	grpcOpts.TLS.ClientSANHostname = envoyproxy.Compat != nil
	if f.drain < 0 {
		return usageErr(fmt.Errorf("--drain-period %v: must not be negative", f.drain))
	}
	wo, err := watchOptions(f.settle)
	if err != nil {
		return err
	}
	var token string
	if f.adminTokenEnv != "" {
		if token = os.Getenv(f.adminTokenEnv); token == "" {
			return usageErr(fmt.Errorf("--admin-token-env: environment variable %s is empty or unset", f.adminTokenEnv))
		}
	}
	for _, t := range []*tlsFlags{&f.httpTLS, &f.adminTLS} {
		if err := t.check(); err != nil {
			return usageErr(err)
		}
	}
	statsd, err1 := f.ecosystem.statsdOptions()
	xds, err2 := f.ecosystem.xdsOptions()
	tracing, err3 := f.ecosystem.tracingOptions()
	if err := cmp.Or(err1, err2, err3); err != nil {
		return usageErr(err)
	}
	redisTLS, err := f.redis.options(f.store, f.redisURL, envoyproxy.Counting, &f.compat)
	if err != nil {
		return usageErr(err)
	}
	sig, stopSignals := lifecycle.NotifySignals()
	defer stopSignals()
	err = server.RunRLS(ctx, server.RLSOptions{
		ConfigPath: f.config, MergeDomains: f.mergeDomains, AllowUnknownDomains: f.allowUnknown,
		GRPCListen: f.grpcListen, GRPC: grpcOpts, HTTPListen: f.httpListen, AdminListen: f.adminListen,
		HTTPTLS: f.httpTLS.files, AdminTLS: f.adminTLS.files, AdminToken: token,
		Store: f.store, RedisURL: f.redisURL,
		OnStoreError: onErr, AuthOnStoreError: authOnErr, LocalShare: f.localShare, NearLimit: f.nearLimit,
		ClientIP: clientip.Config{TrustedProxies: trusted, Header: f.ipHeader}, AuthDomain: f.defaultDom,
		NoHeaders: noHeaders, CallTimeout: f.callTimeout, MaxDetailedSeries: f.maxDetailed,
		RedisTimeout: f.redisTimeout, RedisTLS: redisTLS, RedisPerSecondURL: f.redis.perSecondURL, RedisPerSecondTimeout: f.redis.perSecondTimeout,
		Envoyproxy: envoyproxy, Statsd: statsd, XDS: xds, Tracing: tracing,
		DrainPeriod: &f.drain, ShutdownTimeout: f.grace,
		Reload: sig.Reload, Hurry: sig.Hurry, Watch: f.watch, WatchOptions: wo,
		Stdout: cmd.OutOrStdout(), Logger: logger,
	})
	var ce *server.ConfigError
	if errors.As(err, &ce) {
		return usageErr(err)
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
