package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/redisstore"
)

// redisFlags are the flags of `portero rls` for what managed Redis
// services and envoyproxy/ratelimit's deployments add to --redis-url: TLS
// files and the per-second Redis.
type redisFlags struct {
	tls              redisstore.TLSFiles
	perSecondURL     string
	perSecondTimeout time.Duration
}

func (r *redisFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&r.tls.CAFile, "redis-tls-ca", "", "with a rediss:// URL, PEM CA certificates trusted beside the system's for Redis's certificate (REDIS_TLS_CACERT)")
	fl.StringVar(&r.tls.CertFile, "redis-tls-cert", "", "with a rediss:// URL, PEM client certificate presented to Redis (REDIS_TLS_CLIENT_CERT)")
	fl.StringVar(&r.tls.KeyFile, "redis-tls-key", "", "PEM key of --redis-tls-cert (REDIS_TLS_CLIENT_KEY)")
	fl.BoolVar(&r.tls.SkipHostnameVerification, "redis-tls-skip-hostname-verification", false, "with a rediss:// URL, check that a trusted CA signed Redis's certificate but not the name in it (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION)")
	fl.StringVar(&r.perSecondURL, "redis-per-second-url", "", "with --counting each, a second Redis for the counters of per-second limits, as --redis-url (REDIS_PERSECOND, REDIS_PERSECOND_URL…)")
	fl.DurationVar(&r.perSecondTimeout, "redis-per-second-timeout", 0, "longest time one call to --redis-per-second-url may take; --redis-timeout when 0 (REDIS_PERSECOND_TIMEOUT)")
}

// options checks the flags against the store's and returns the TLS files,
// nil when none is given.
func (r *redisFlags) options(store, url string, counting engine.Counting, c *compatFlags) (*redisstore.TLSFiles, error) {
	if r.perSecondURL != "" {
		switch {
		case store != "redis":
			return nil, errors.New("--redis-per-second-url applies to --store redis")
		case counting != engine.CountEach:
			// All-or-nothing keeps no plain counters: nothing goes there.
			if err := c.misplaced("redis-per-second-url", "applies with --counting each", false); err != nil {
				return nil, err
			}
			r.perSecondURL = ""
		}
	}
	if r.tls == (redisstore.TLSFiles{}) {
		return nil, nil
	}
	if store != "redis" || !strings.HasPrefix(url, "rediss") && !strings.HasPrefix(r.perSecondURL, "rediss") {
		return nil, fmt.Errorf("--redis-tls-* apply to a rediss:// or rediss-sentinel:// --redis-url (or --redis-per-second-url)")
	}
	if _, err := r.tls.Config(); err != nil {
		return nil, err
	}
	files := r.tls
	return &files, nil
}
