package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/checkapi"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/lifecycle"
	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/internal/watch"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

// rlsFlags are the options of `portero rls`.
type rlsFlags struct {
	config, grpcListen, httpListen               string
	logs                                         logFlags
	store, redisURL                              string
	onStoreError, authOnStoreError, defaultDom   string
	localShare                                   float64
	trusted, ipHeader                            string
	mergeDomains, allowUnknown, watch, noHeaders bool
	callTimeout, grace                           time.Duration
	transport                                    *transportFlags
}

func newRLSCmd() *cobra.Command {
	var f rlsFlags
	cmd := &cobra.Command{
		Use:   "rls",
		Short: "Run the decision service: Envoy's rate limit service (gRPC) and the HTTP check API",
		Long: `rls runs Portero as a decision service for proxies:

  gRPC  envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, a drop-in
        for envoyproxy/ratelimit reading the same YAML (--config, a file or a
        directory of *.yaml files), plus the gRPC health service and server
        reflection; TLS and mTLS with --grpc-tls-*;
  HTTP  POST /v1/check (JSON decisions), /v1/auth (nginx auth_request,
        Traefik forwardAuth) and /healthz.

All descriptors of one request are decided all-or-nothing: a refused request
counts against no limit. Limits are envoyproxy/ratelimit's clock-aligned fixed
windows unless a descriptor's rate_limit.portero picks another algorithm.

Both listeners bind loopback by default (gRPC 127.0.0.1:8081, HTTP
127.0.0.1:8082, clear of serve's 8080 and 9090). Bound elsewhere, anyone who
reaches them can spend any client's limits, and a warning says so, unless
gRPC requires client certificates (--grpc-tls-client-ca): put them on a
private network, behind a proxy that authenticates, or use mTLS. gRPC runs on
grpc-go with connection caps, timeouts and keepalive enforcement
(--grpc-*); --grpc-transport lean is a faster server for loopback and unix
sockets only.

It reloads the configuration on SIGHUP (and with --watch when a file
changes, a Kubernetes ConfigMap or a runtime directory's symlink swap
included, once the files have settled; a bad file is refused and the running
configuration kept), and on SIGTERM or Ctrl-C stops gracefully.`,
		Example: `  portero rls --config examples/envoy/config
  portero rls --config /srv/runtime_data/current/ratelimit/config --store redis --redis-url redis://localhost:6379
  portero rls --config limits.yaml --grpc-listen 10.0.0.5:8081 --http-listen off`,
		Args: func(cmd *cobra.Command, args []string) error { return usageErr(cobra.NoArgs(cmd, args)) },
		RunE: func(cmd *cobra.Command, _ []string) error { return runRLS(cmd.Context(), cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "envoyproxy/ratelimit YAML: a file or a directory of *.yaml/*.yml files (required)")
	fl.StringVar(&f.grpcListen, "grpc-listen", "127.0.0.1:8081", "gRPC address for Envoy: host:port, unix:PATH, or off; loopback unless told otherwise")
	f.transport = addTransportFlags(fl)
	fl.StringVar(&f.httpListen, "http-listen", "127.0.0.1:8082", "HTTP address for /v1/check and /v1/auth (off to disable); loopback unless told otherwise")
	fl.StringVar(&f.store, "store", "memory", "where counters live: memory or redis")
	fl.StringVar(&f.redisURL, "redis-url", "redis://127.0.0.1:6379", "Redis with --store redis: redis://host:port[/db], rediss:// for TLS, or redis-sentinel://host:port[,host:port…]/master")
	fl.StringVar(&f.onStoreError, "on-store-error", "error", "failure policy of gRPC and /v1/check when the store fails: error (gRPC UNAVAILABLE, so that Envoy's failure_mode_deny decides; 503), allow, deny (OVER_LIMIT) or local (a share of each limit in this instance's memory, --store redis)")
	fl.StringVar(&f.authOnStoreError, "auth-on-store-error", "allow", "failure policy of /v1/auth when the store fails: allow (200), deny (the deny status), local or error (503)")
	fl.Float64Var(&f.localShare, "local-share", 1, "with local: the share of each limit one instance admits from memory while the store fails, in (0, 1]")
	fl.StringVar(&f.defaultDom, "auth-domain", "", "domain of /v1/auth requests that name none")
	fl.StringVar(&f.trusted, "trusted-proxies", "127.0.0.0/8,::1/128", "comma-separated networks whose forwarding headers /v1/auth believes")
	fl.StringVar(&f.ipHeader, "client-ip-header", "X-Forwarded-For", "the one forwarding header /v1/auth reads the client address from")
	fl.BoolVar(&f.mergeDomains, "merge-domains", false, "let several files add to one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
	fl.BoolVar(&f.allowUnknown, "allow-unknown-domains", false, "answer OK for unconfigured domains, as envoyproxy/ratelimit does (default: NOT_FOUND)")
	fl.BoolVar(&f.watch, "watch", false, "reload when a configuration file changes (file notifications, and a poll every 2s for symlink swaps)")
	fl.BoolVar(&f.noHeaders, "no-headers", false, "do not send RateLimit, RateLimit-Policy and Retry-After in response_headers_to_add")
	fl.DurationVar(&f.callTimeout, "call-timeout", time.Second, "longest time one decision may take when the caller's deadline is later")
	fl.DurationVar(&f.grace, "grace", 5*time.Second, "how long in-flight calls may finish on shutdown")
	f.logs.add(cmd)
	return cmd
}

func runRLS(ctx context.Context, cmd *cobra.Command, f rlsFlags) error {
	logger, err := f.logs.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	if f.config == "" {
		return usageErr(errors.New("--config is required: an envoyproxy/ratelimit YAML file or directory"))
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
	serverOpts, err := f.transport.options(f.grace)
	if err != nil {
		return usageErr(err)
	}
	if f.grpcListen == "off" && f.httpListen == "off" {
		return usageErr(errors.New("both --grpc-listen and --http-listen are off: nothing to serve"))
	}
	opts := envoyconf.Options{MergeDomains: f.mergeDomains}
	// The watcher's baseline is taken before the files are read, so that
	// a change in between is a reload rather than lost.
	var changes <-chan struct{}
	if f.watch {
		w, err := watch.New(f.config, watch.Options{Logger: logger})
		if err != nil {
			logger.Warn("rls: cannot watch the configuration; reload with SIGHUP", "err", err)
		} else {
			defer w.Close()
			changes = w.C
		}
	}
	limits, err := envoyconf.Load(f.config, opts)
	if err != nil {
		return usageErr(err)
	}
	store, err := openRLSStore(f, logger)
	if err != nil {
		return err
	}
	defer store.Close(context.Background())

	// One compiler and one engine for gRPC and /v1/check (the same
	// counters, the same failure policy), a second engine for /v1/auth's
	// failure policy.
	compiler := descriptor.NewCompiler(limits, descriptor.Options{AllowUnknownDomains: f.allowUnknown})
	eng, err := engine.New(engine.Options{Store: store, OnError: onErr, LocalShare: f.localShare})
	if err != nil {
		return usageErr(err)
	}
	authEng, err := engine.New(engine.Options{Store: store, OnError: authOnErr, LocalShare: f.localShare})
	if err != nil {
		return usageErr(err)
	}
	logger.Info("rls: configuration loaded", "domains", strings.Join(limits.Domains(), ","), "files", len(limits.Files()))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	running := 0
	out := cmd.OutOrStdout()
	if f.grpcListen != "off" {
		svc := rls.NewService(compiler, eng, rls.ServiceOptions{CallTimeout: f.callTimeout, NoHeaders: f.noHeaders, Logger: logger})
		grpcSrv, err := rls.NewServer(svc, serverOpts)
		if err != nil {
			return usageErr(err)
		}
		lis, err := rls.Listen(f.grpcListen, serverOpts.SocketMode)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "portero rls: gRPC on %s (%s)\n", lis.Addr(), serverOpts.Transport)
		if serverOpts.TLS.ClientCAFile == "" {
			warnExposed(logger, "gRPC", f.grpcListen)
		}
		running++
		go func() { errc <- grpcSrv.Serve(lis) }()
		go func() {
			<-ctx.Done()
			sctx, scancel := context.WithTimeout(context.Background(), f.grace)
			defer scancel()
			grpcSrv.Shutdown(sctx)
		}()
	}
	if f.httpListen != "off" {
		h, err := checkapi.New(checkapi.Config{Compiler: compiler, Engine: eng, AuthEngine: authEng,
			ClientIP: clientip.Config{TrustedProxies: trusted, Header: f.ipHeader}, DefaultDomain: f.defaultDom,
			Timeout: f.callTimeout, Logger: logger})
		if err != nil {
			return usageErr(err)
		}
		lis, err := net.Listen("tcp", f.httpListen)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "portero rls: HTTP on %s\n", lis.Addr())
		warnExposed(logger, "HTTP", f.httpListen)
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)}
		running++
		go func() {
			err := srv.Serve(lis)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			errc <- err
		}()
		go func() {
			<-ctx.Done()
			sctx, scancel := context.WithTimeout(context.Background(), f.grace)
			defer scancel()
			srv.Shutdown(sctx)
		}()
	}

	reload := func(why string) {
		c, err := envoyconf.Load(f.config, opts)
		if err != nil {
			logger.Error("rls: reload refused, keeping the running configuration", "why", why, "err", err)
			return
		}
		compiler.SetLimits(c)
		logger.Info("rls: configuration reloaded", "why", why, "domains", strings.Join(c.Domains(), ","))
	}
	sig, stopSignals := lifecycle.NotifySignals()
	defer stopSignals()
	var first error
	for running > 0 {
		select {
		case <-sig.Reload:
			reload("SIGHUP")
		case <-changes:
			reload("files changed")
		case err := <-errc:
			running--
			if err != nil && first == nil {
				first = err
			}
			cancel() // one listener failing stops the other
		}
	}
	return first
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

func openRLSStore(f rlsFlags, logger *slog.Logger) (portero.Store, error) {
	switch f.store {
	case "memory":
		return memstore.New(memstore.Config{})
	case "redis":
		// The store reports a failure as an error and the engine applies
		// --on-store-error. Started during an outage, it counts in Redis
		// once Redis answers.
		return redisstore.New(redisstore.Config{URL: f.redisURL, Logger: logger, DialInBackground: true})
	}
	return nil, usageErr(fmt.Errorf("--store %q: want memory or redis", f.store))
}

// warnExposed warns when a listener of `portero rls` that authenticates no
// client (no token; for gRPC, no mTLS) binds more than loopback or a unix
// socket.
func warnExposed(log *slog.Logger, what, addr string) {
	if !lifecycle.Loopback(addr) && !strings.HasPrefix(addr, "unix:") {
		log.Warn("rls: the "+what+" listener is not on loopback and has no TLS or token: anyone who can reach it can spend any client's limits",
			"addr", addr)
	}
}
