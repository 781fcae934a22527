package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/internal/server"
)

// compatFlags are the flags of `portero rls` that make it answer as
// envoyproxy/ratelimit (--compat envoyproxy), bring Portero's improvements
// back one at a time, and serve its debug port. docs/envoy.md has the
// table.
type compatFlags struct {
	compat, counting, reset, headers, headerNames string
	keyPrefix                                     string
	jitter                                        time.Duration
	localCache                                    int
	shadow, quota, metadata, stopIncrement        bool
	ignoreDotFiles, healthyWithConfig, env        bool
	notes                                         []envNote // variables not honoured, from the environment
	// fromEnv are the flags the environment set (the command line left
	// them alone), each with the variables it came from.
	fromEnv map[string]string
}

func (c *compatFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&c.compat, "compat", "off", "envoyproxy: answer exactly as envoyproxy/ratelimit does (the default when configured by its environment); off: Portero's answers")
	fl.StringVar(&c.counting, "counting", "", "how a request's descriptors are counted: all-or-nothing (Portero's default: a refused request counts nothing) or each (envoyproxy/ratelimit's: each on its own, refused or not; the default with --compat envoyproxy)")
	fl.StringVar(&c.reset, "reset", "", "with --compat envoyproxy, duration_until_reset in whole seconds as envoyproxy/ratelimit rounds them (seconds, the default) or to the nanosecond (exact)")
	fl.StringVar(&c.headers, "headers", "", "response_headers_to_add: ietf (RateLimit, RateLimit-Policy, Retry-After: Portero's default), envoyproxy (its three LIMIT_RESPONSE_HEADERS_ENABLED fields, with --compat envoyproxy) or off (the default with --compat envoyproxy)")
	fl.StringVar(&c.headerNames, "envoyproxy-header-names", "RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset", "names of --headers envoyproxy's three fields (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER)")
	fl.BoolVar(&c.shadow, "shadow-mode", false, "with --compat envoyproxy, answer every request OK, the statuses unchanged (SHADOW_MODE)")
	fl.BoolVar(&c.quota, "quota-mode", false, "every limit in quota_mode: refuse only when every quota descriptor of a request is over (QUOTA_MODE)")
	fl.BoolVar(&c.metadata, "dynamic-metadata", false, "with --compat envoyproxy, fill dynamic_metadata as envoyproxy/ratelimit does (RESPONSE_DYNAMIC_METADATA)")
	fl.BoolVar(&c.stopIncrement, "stop-increment-over-limit", false, "with --counting each, when a descriptor would go over its limit count only those that would (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)")
	fl.StringVar(&c.keyPrefix, "cache-key-prefix", "", "with --compat envoyproxy, the prefix of envoyproxy/ratelimit's Redis keys (CACHE_KEY_PREFIX)")
	fl.IntVar(&c.localCache, "local-cache-size", 0, "with --counting each, bytes of a local cache of the counters over their limit, which are then refused without asking the store and not counted until their window ends (LOCAL_CACHE_SIZE_IN_BYTES; at least 512 KiB when set); 0 for none")
	fl.DurationVar(&c.jitter, "expiration-jitter", 0, "with --counting each, a random time below this added to each counter's expiry (EXPIRATION_JITTER_MAX_SECONDS)")
	fl.BoolVar(&c.ignoreDotFiles, "ignore-dotfiles", false, "with --compat envoyproxy, skip configuration files whose name starts with '.' (RUNTIME_IGNOREDOTFILES; Portero's own mode always does)")
	fl.BoolVar(&c.healthyWithConfig, "healthy-with-config", false, "/healthcheck fails until a configuration with a domain is loaded (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)")
	fl.BoolVar(&c.env, "envoyproxy-env", false, "read envoyproxy/ratelimit's environment variables (RUNTIME_ROOT, REDIS_URL, …) into these flags; on when portero runs as ratelimit, or when rls has no --config and RUNTIME_* is set")
	fl.MarkHidden("envoyproxy-env")
}

// applyEnvoyproxyEnv sets the flags the command line left alone from
// envoyproxy/ratelimit's environment, when this run is configured by it:
// --envoyproxy-env, or no --config and one of its runtime variables set.
func applyEnvoyproxyEnv(cmd *cobra.Command, c *compatFlags, lookup func(string) (string, bool)) error {
	if !c.env && (cmd.Flags().Changed("config") || !envoyproxyEnvSet(lookup)) {
		return nil
	}
	flags, notes, err := envoyproxyEnv(lookup)
	if err != nil {
		return usageErr(fmt.Errorf("envoyproxy/ratelimit's environment: %w", err))
	}
	c.env, c.notes = true, notes
	c.fromEnv, err = applyEnv(cmd.Flags(), flags)
	return usageErr(err)
}

// misplaced is the error of a flag set where it does not apply (why says
// where it does). The environment sets every setting envoyproxy/ratelimit
// has, so one that came from it and changes no answer in this mode (a
// counter's expiry jitter when nothing is counted its way, say) is
// dropped instead: /bin/ratelimit --counting all-or-nothing must run.
// One that would change an answer is an error naming its variable.
func (c *compatFlags) misplaced(flag, why string, changesAnswers bool) error {
	from, ok := c.fromEnv[flag]
	if !ok {
		return fmt.Errorf("--%s %s", flag, why)
	}
	if changesAnswers {
		return fmt.Errorf("%s (--%s) %s", from, flag, why)
	}
	return nil
}

// setFlag is a flag, whether it is set, and whether it changes answers.
type setFlag struct {
	flag                string
	set, changesAnswers bool
}

// misplacedAll is misplaced's first error among the flags that are set.
func (c *compatFlags) misplacedAll(why string, flags []setFlag) error {
	for _, x := range flags {
		if x.set {
			if err := c.misplaced(x.flag, why, x.changesAnswers); err != nil {
				return err
			}
		}
	}
	return nil
}

// options checks the flags and returns what they stand for, and whether
// the RLS sends no rate limit headers (Portero's own mode's NoHeaders).
func (c *compatFlags) options(noHeaderFlag bool) (server.EnvoyproxyOptions, bool, error) {
	var o server.EnvoyproxyOptions
	on := false
	switch c.compat {
	case "envoyproxy":
		on = true
	case "off", "":
	default:
		return o, false, fmt.Errorf("--compat %q: want envoyproxy or off", c.compat)
	}
	if !on {
		// What applies only to envoyproxy/ratelimit's answers; from the
		// environment, what only names its files or keys is dropped.
		if err := c.misplacedAll("applies with --compat envoyproxy", []setFlag{{"reset", c.reset != "", true},
			{"shadow-mode", c.shadow, true}, {"dynamic-metadata", c.metadata, true},
			{"cache-key-prefix", c.keyPrefix != "", false}, {"ignore-dotfiles", c.ignoreDotFiles, false}}); err != nil {
			return o, false, err
		}
		c.keyPrefix, c.ignoreDotFiles = "", false
	}
	switch c.counting {
	case "":
		o.Counting = engine.AllOrNothing
		if on {
			o.Counting = engine.CountEach
		}
	case "all-or-nothing":
		o.Counting = engine.AllOrNothing
	case "each":
		o.Counting = engine.CountEach
	default:
		return o, false, fmt.Errorf("--counting %q: want all-or-nothing or each", c.counting)
	}
	if c.jitter < 0 {
		return o, false, fmt.Errorf("--expiration-jitter %v: must not be negative", c.jitter)
	}
	if c.localCache < 0 {
		return o, false, fmt.Errorf("--local-cache-size %d: must not be negative", c.localCache)
	}
	if o.Counting == engine.CountEach {
		o.StopIncrementWhenOver, o.CounterJitter, o.LocalCacheSize = c.stopIncrement, c.jitter, c.localCache
	} else {
		// All-or-nothing counts nothing over a limit and keeps no such
		// counters: neither changes an answer there.
		if err := c.misplacedAll("applies with --counting each", []setFlag{{"stop-increment-over-limit", c.stopIncrement, false},
			{"expiration-jitter", c.jitter != 0, false}, {"local-cache-size", c.localCache != 0, false}}); err != nil {
			return o, false, err
		}
	}
	headers := rls.HeadersIETF
	if on {
		headers = rls.HeadersNone
	}
	if c.headers != "" {
		h, err := rls.ParseHeaderStyle(c.headers)
		if err != nil {
			return o, false, fmt.Errorf("--headers %q: want ietf, envoyproxy or off", c.headers)
		}
		headers = h
	}
	if noHeaderFlag {
		if _, env := c.fromEnv["headers"]; !env && headers != rls.HeadersNone {
			return o, false, fmt.Errorf("--no-headers and --headers %s: give one", c.headers)
		}
		headers = rls.HeadersNone
	}
	if headers == rls.HeadersEnvoyproxy && !on {
		if err := c.misplaced("headers", "envoyproxy applies with --compat envoyproxy", true); err != nil {
			return o, false, err
		}
	}
	names := strings.Split(c.headerNames, ",")
	if len(names) != 3 {
		return o, false, fmt.Errorf("--envoyproxy-header-names %q: want three names, comma-separated", c.headerNames)
	}
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
		if err := checkHeaderName(names[i]); err != nil {
			return o, false, fmt.Errorf("--envoyproxy-header-names: %w", err)
		}
	}
	o.KeyPrefix, o.IgnoreDotFiles, o.QuotaMode = c.keyPrefix, c.ignoreDotFiles, c.quota
	o.HealthyWithConfig = c.healthyWithConfig
	if on {
		reset := c.reset
		if reset == "" {
			reset = "seconds"
		}
		if reset != "seconds" && reset != "exact" {
			return o, false, fmt.Errorf("--reset %q: want seconds or exact", c.reset)
		}
		o.Compat = &rls.Compat{ExactReset: reset == "exact", Headers: headers, Metadata: c.metadata}
		o.ShadowMode = c.shadow
		copy(o.Compat.HeaderNames[:], names)
	}
	return o, headers == rls.HeadersNone, nil
}
