package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/portero-rl/portero/internal/rlsstats"
)

// ecosystemFlags are the flags of `portero rls` for what
// envoyproxy/ratelimit's users run beside it: statsd statistics. The
// environment's variables map onto them in ecosystemEnv.
type ecosystemFlags struct {
	statsd, statsdProtocol, statsdTags string
	statsdFlush                        time.Duration
}

func (f *ecosystemFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.statsd, "statsd", "", "host:port of a statsd server: send envoyproxy/ratelimit's statistics there (USE_STATSD, STATSD_HOST, STATSD_PORT); off when empty")
	fl.StringVar(&f.statsdProtocol, "statsd-protocol", "tcp", "tcp or udp, with --statsd (STATSD_PROTOCOL)")
	fl.StringVar(&f.statsdTags, "statsd-tags", "", "tags added to every statistic, key:value,key:value (EXTRA_TAGS)")
	fl.DurationVar(&f.statsdFlush, "statsd-flush-interval", rlsstats.DefaultFlushInterval, "how often counters and gauges are sent (STATS_FLUSH_INTERVAL)")
}

// statsdOptions returns the statsd options the flags give; nil without
// --statsd.
func (f *ecosystemFlags) statsdOptions() (*rlsstats.Options, error) {
	if f.statsd == "" {
		return nil, nil
	}
	tags, err := parseTags(f.statsdTags)
	if err != nil {
		return nil, fmt.Errorf("--statsd-tags: %w", err)
	}
	if f.statsdFlush <= 0 {
		return nil, fmt.Errorf("--statsd-flush-interval %v: must be positive", f.statsdFlush)
	}
	return &rlsstats.Options{Addr: f.statsd, Protocol: f.statsdProtocol, Tags: tags, FlushInterval: f.statsdFlush}, nil
}

// parseTags reads envconfig's map syntax, key:value,key:value.
func parseTags(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	tags := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			return nil, fmt.Errorf("%q: want key:value", kv)
		}
		tags[k] = v
	}
	return tags, nil
}

// ecosystemEnv maps envoyproxy/ratelimit's statistics variables onto the
// flags: statsd (USE_STATSD, its default, unless DISABLE_STATS or another
// sink is chosen) at STATSD_HOST:STATSD_PORT over STATSD_PROTOCOL (which
// its gostats library reads), EXTRA_TAGS, STATS_FLUSH_INTERVAL.
func ecosystemEnv(e *envReader, set func(flag, value string, from ...string)) {
	useStatsd := e.boolean("USE_STATSD", true)
	useProm, useDog := e.boolean("USE_PROMETHEUS", false), e.boolean("USE_DOG_STATSD", false)
	if n := btoi(useStatsd) + btoi(useProm) + btoi(useDog); n > 1 {
		e.fail("USE_STATSD", errors.New("envoyproxy/ratelimit runs with one of USE_STATSD, USE_DOG_STATSD, USE_PROMETHEUS: set the others to false"))
	}
	addr := e.hostPort("STATSD_HOST", "localhost", "STATSD_PORT", 8125)
	if !useStatsd || e.boolean("DISABLE_STATS", false) {
		addr = ""
	}
	set("statsd", addr, "USE_STATSD", "STATSD_HOST", "STATSD_PORT", "DISABLE_STATS")
	switch p := strings.ToLower(e.str("STATSD_PROTOCOL", "tcp")); p {
	case "tcp", "udp":
		set("statsd-protocol", p, "STATSD_PROTOCOL")
	default:
		e.fail("STATSD_PROTOCOL", fmt.Errorf("%q: want tcp or udp", p))
	}
	tags := e.str("EXTRA_TAGS", "")
	if _, err := parseTags(tags); err != nil {
		e.fail("EXTRA_TAGS", err)
	}
	set("statsd-tags", tags, "EXTRA_TAGS")
	set("statsd-flush-interval", e.duration("STATS_FLUSH_INTERVAL", rlsstats.DefaultFlushInterval).String(), "STATS_FLUSH_INTERVAL")
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
