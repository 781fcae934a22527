package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/portero-rl/portero/internal/rlsstats"
	"github.com/portero-rl/portero/internal/rlstrace"
	"github.com/portero-rl/portero/internal/rlsxds"
)

// ecosystemFlags are the flags of `portero rls` for what
// envoyproxy/ratelimit's users run beside it: statsd statistics and
// configuration over xDS, OpenTelemetry tracing. The environment's variables map onto them in
// ecosystemEnv.
type ecosystemFlags struct {
	statsd, statsdProtocol, statsdTags string
	statsdFlush                        time.Duration
	dogstatsd                          bool
	dogMogrifiers                      []string

	xdsServer, xdsNodeID, xdsNodeMetadata, xdsHeaders string
	xdsTLS                                            bool
	xdsTLSFiles                                       rlsxds.TLSFiles
	xdsRetryInitial, xdsRetryMax                      time.Duration
	xdsMaxMsgSize                                     int

	tracing                                       bool
	traceProtocol, traceService, traceNS, traceID string
	traceSampling                                 float64
}

func (f *ecosystemFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.statsd, "statsd", "", "host:port of a statsd server: send envoyproxy/ratelimit's statistics there (USE_STATSD, STATSD_HOST, STATSD_PORT); off when empty")
	fl.StringVar(&f.statsdProtocol, "statsd-protocol", "tcp", "tcp or udp, with --statsd (STATSD_PROTOCOL)")
	fl.StringVar(&f.statsdTags, "statsd-tags", "", "tags added to every statistic, key:value,key:value (EXTRA_TAGS)")
	fl.BoolVar(&f.dogstatsd, "dogstatsd", false, "with --statsd, send DogStatsD over UDP: tags as DogStatsD tags (USE_DOG_STATSD)")
	fl.StringArrayVar(&f.dogMogrifiers, "dogstatsd-mogrifier", nil, `with --dogstatsd, rename statistics: {"pattern":REGEXP,"name":NAME,"tags":{KEY:VALUE}}, $1… the pattern's groups; the first that matches applies (USE_DOG_STATSD_MOGRIFIERS); repeatable`)
	fl.DurationVar(&f.statsdFlush, "statsd-flush-interval", rlsstats.DefaultFlushInterval, "how often counters and gauges are sent (STATS_FLUSH_INTERVAL)")
	fl.StringVar(&f.xdsServer, "xds-server", "", "host:port of an xDS management server: take the configuration from it instead of --config (CONFIG_TYPE=GRPC_XDS_SOTW, CONFIG_GRPC_XDS_SERVER_URL)")
	fl.StringVar(&f.xdsNodeID, "xds-node-id", "default", "node id sent to the xDS server (CONFIG_GRPC_XDS_NODE_ID)")
	fl.StringVar(&f.xdsNodeMetadata, "xds-node-metadata", "", "node metadata sent to the xDS server, key=value,key=value (CONFIG_GRPC_XDS_NODE_METADATA)")
	fl.StringVar(&f.xdsHeaders, "xds-headers", "", "headers sent on the xDS stream, key:value,key:value (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS)")
	fl.BoolVar(&f.xdsTLS, "xds-tls", false, "dial the xDS server with TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS)")
	fl.StringVar(&f.xdsTLSFiles.CertFile, "xds-tls-cert", "", "with --xds-tls, PEM client certificate (CONFIG_GRPC_XDS_CLIENT_TLS_CERT)")
	fl.StringVar(&f.xdsTLSFiles.KeyFile, "xds-tls-key", "", "with --xds-tls, PEM key of --xds-tls-cert (CONFIG_GRPC_XDS_CLIENT_TLS_KEY)")
	fl.StringVar(&f.xdsTLSFiles.CAFile, "xds-tls-ca", "", "with --xds-tls, PEM CA the server's certificate is checked against, beside the system's (CONFIG_GRPC_XDS_SERVER_TLS_CACERT)")
	fl.StringVar(&f.xdsTLSFiles.ServerName, "xds-tls-server-name", "", "with --xds-tls, the name the server's certificate must carry; its host by default (CONFIG_GRPC_XDS_SERVER_TLS_SAN)")
	fl.DurationVar(&f.xdsRetryInitial, "xds-retry-initial", 10*time.Second, "first wait before a new xDS stream after one failed, doubling (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL)")
	fl.DurationVar(&f.xdsRetryMax, "xds-retry-max", time.Minute, "longest wait between xDS streams (XDS_CLIENT_BACKOFF_MAX_INTERVAL)")
	fl.BoolVar(&f.tracing, "tracing", false, "trace every call with OpenTelemetry, exported over OTLP to where the OTEL_EXPORTER_OTLP_* variables say (TRACING_ENABLED)")
	fl.StringVar(&f.traceProtocol, "tracing-protocol", "http", "OTLP exporter's protocol, http or grpc (TRACING_EXPORTER_PROTOCOL)")
	fl.StringVar(&f.traceService, "tracing-service-name", "RateLimit", "the traces' service.name (TRACING_SERVICE_NAME)")
	fl.StringVar(&f.traceNS, "tracing-service-namespace", "", "the traces' service.namespace (TRACING_SERVICE_NAMESPACE)")
	fl.StringVar(&f.traceID, "tracing-service-instance-id", "", "the traces' service.instance.id; a random UUID when empty (TRACING_SERVICE_INSTANCE_ID)")
	fl.Float64Var(&f.traceSampling, "tracing-sampling-rate", 1, "share of new traces recorded, 0 to 1; a caller's sampled trace is always continued (TRACING_SAMPLING_RATE)")
	fl.IntVar(&f.xdsMaxMsgSize, "xds-max-msg-size", 0, "largest xDS response in bytes; 0: gRPC's 4 MiB (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES)")
}

// tracingOptions returns the tracing options the flags give; nil without
// --tracing.
func (f *ecosystemFlags) tracingOptions() (*rlstrace.Options, error) {
	if !f.tracing {
		return nil, nil
	}
	if f.traceProtocol != "http" && f.traceProtocol != "grpc" {
		return nil, fmt.Errorf("--tracing-protocol %q: want http or grpc", f.traceProtocol)
	}
	return &rlstrace.Options{Protocol: f.traceProtocol, ServiceName: f.traceService, ServiceNamespace: f.traceNS,
		ServiceInstanceID: f.traceID, SamplingRate: f.traceSampling}, nil
}

// xdsOptions returns the xDS options the flags give; nil without
// --xds-server.
func (f *ecosystemFlags) xdsOptions() (*rlsxds.Options, error) {
	if f.xdsServer == "" {
		return nil, nil
	}
	headers, err := parseTags(f.xdsHeaders)
	if err != nil {
		return nil, fmt.Errorf("--xds-headers: %w", err)
	}
	o := &rlsxds.Options{ServerURL: f.xdsServer, NodeID: f.xdsNodeID, NodeMetadata: f.xdsNodeMetadata, Headers: headers,
		RetryInitial: f.xdsRetryInitial, RetryMax: f.xdsRetryMax, MaxRecvMsgSize: f.xdsMaxMsgSize}
	if f.xdsTLS {
		files := f.xdsTLSFiles
		o.TLS = &files
	}
	return o, nil
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
	o := &rlsstats.Options{Addr: f.statsd, Protocol: f.statsdProtocol, Tags: tags, FlushInterval: f.statsdFlush, DogStatsd: f.dogstatsd}
	if len(f.dogMogrifiers) > 0 && !f.dogstatsd {
		return nil, errors.New("--dogstatsd-mogrifier: only with --dogstatsd")
	}
	for i, js := range f.dogMogrifiers {
		m, err := parseMogrifier(js)
		if err != nil {
			return nil, fmt.Errorf("--dogstatsd-mogrifier %d: %w", i+1, err)
		}
		o.Mogrifiers = append(o.Mogrifiers, m)
	}
	return o, nil
}

// mogrifierJSON is one --dogstatsd-mogrifier.
type mogrifierJSON struct {
	Pattern string            `json:"pattern"`
	Name    string            `json:"name"`
	Tags    map[string]string `json:"tags"`
}

func parseMogrifier(js string) (rlsstats.Mogrifier, error) {
	var m mogrifierJSON
	d := json.NewDecoder(strings.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return rlsstats.Mogrifier{}, fmt.Errorf("%q: %w", js, err)
	}
	return rlsstats.NewMogrifier(m.Pattern, m.Name, m.Tags)
}

// dogstatsdEnv maps USE_DOG_STATSD_MOGRIFIERS=A,B and each one's
// DOG_STATSD_MOGRIFIER_A_PATTERN, _NAME and _TAGS (key:value,…) onto
// --dogstatsd-mogrifier flags, in the listed order; without
// USE_DOG_STATSD they do nothing, as there.
func dogstatsdEnv(e *envReader, set func(flag, value string, from ...string), useDog bool) {
	list := e.str("USE_DOG_STATSD_MOGRIFIERS", "")
	if list == "" || !useDog {
		return
	}
	for _, name := range strings.Split(list, ",") {
		prefix := "DOG_STATSD_MOGRIFIER_" + strings.ToUpper(strings.TrimSpace(name)) + "_"
		tags, err := parseTags(e.str(prefix+"TAGS", ""))
		if err != nil {
			e.fail(prefix+"TAGS", err)
			continue
		}
		m := mogrifierJSON{Pattern: e.str(prefix+"PATTERN", ""), Name: e.str(prefix+"NAME", ""), Tags: tags}
		if _, err := rlsstats.NewMogrifier(m.Pattern, m.Name, m.Tags); err != nil {
			e.fail(prefix+"*", fmt.Errorf("mogrifier %s: %w", name, err))
			continue
		}
		js, _ := json.Marshal(m) // strings and a map of strings: cannot fail
		set("dogstatsd-mogrifier", string(js), "USE_DOG_STATSD_MOGRIFIERS", prefix+"PATTERN", prefix+"NAME", prefix+"TAGS")
	}
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

// ecosystemEnv maps envoyproxy/ratelimit's statistics and xDS variables
// onto the flags (xdsEnv), and statsd (USE_STATSD, its default, unless DISABLE_STATS or another
// sink is chosen; DogStatsD with USE_DOG_STATSD) at STATSD_HOST:STATSD_PORT over STATSD_PROTOCOL (which
// its gostats library reads), EXTRA_TAGS, STATS_FLUSH_INTERVAL.
func ecosystemEnv(e *envReader, set func(flag, value string, from ...string)) {
	xdsEnv(e, set)
	tracingEnv(e, set)
	useStatsd := e.boolean("USE_STATSD", true)
	useProm, useDog := e.boolean("USE_PROMETHEUS", false), e.boolean("USE_DOG_STATSD", false)
	if n := btoi(useStatsd) + btoi(useProm) + btoi(useDog); n > 1 {
		e.fail("USE_STATSD", errors.New("envoyproxy/ratelimit runs with one of USE_STATSD, USE_DOG_STATSD, USE_PROMETHEUS: set the others to false"))
	}
	addr := e.hostPort("STATSD_HOST", "localhost", "STATSD_PORT", 8125)
	if !(useStatsd || useDog) || e.boolean("DISABLE_STATS", false) {
		addr = ""
	}
	set("statsd", addr, "USE_STATSD", "USE_DOG_STATSD", "STATSD_HOST", "STATSD_PORT", "DISABLE_STATS")
	if useDog {
		set("dogstatsd", "true", "USE_DOG_STATSD")
	}
	dogstatsdEnv(e, set, useDog)
	if p, ok := e.oneOf("STATSD_PROTOCOL", "tcp", "udp"); ok {
		set("statsd-protocol", p, "STATSD_PROTOCOL")
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

// xdsEnv maps CONFIG_TYPE=GRPC_XDS_SOTW and its CONFIG_GRPC_XDS_* and
// XDS_CLIENT_* settings onto the --xds-* flags (and no --config).
func xdsEnv(e *envReader, set func(flag, value string, from ...string)) {
	switch t := strings.ToUpper(e.str("CONFIG_TYPE", "FILE")); t {
	case "FILE":
		return
	case "GRPC_XDS_SOTW":
	default:
		e.fail("CONFIG_TYPE", fmt.Errorf("%q: want FILE or GRPC_XDS_SOTW", t))
		return
	}
	set("config", "", "CONFIG_TYPE")
	set("xds-server", e.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"), "CONFIG_GRPC_XDS_SERVER_URL")
	set("xds-node-id", e.str("CONFIG_GRPC_XDS_NODE_ID", "default"), "CONFIG_GRPC_XDS_NODE_ID")
	set("xds-node-metadata", e.str("CONFIG_GRPC_XDS_NODE_METADATA", ""), "CONFIG_GRPC_XDS_NODE_METADATA")
	headers := e.str("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "")
	if _, err := parseTags(headers); err != nil {
		e.fail("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", err)
	}
	set("xds-headers", headers, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
	if e.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
		set("xds-tls", "true", "CONFIG_GRPC_XDS_SERVER_USE_TLS")
		for flag, v := range map[string]string{"xds-tls-cert": "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "xds-tls-key": "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
			"xds-tls-ca": "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "xds-tls-server-name": "CONFIG_GRPC_XDS_SERVER_TLS_SAN"} {
			set(flag, e.str(v, ""), v)
		}
	}
	set("xds-retry-initial", e.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10*time.Second).String(), "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")
	set("xds-retry-max", e.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", time.Minute).String(), "XDS_CLIENT_BACKOFF_MAX_INTERVAL")
	set("xds-max-msg-size", strconv.FormatInt(e.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", 0, 0), 10), "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")
}

// tracingEnv maps TRACING_* onto the --tracing flags (the OTEL_* variables
// are read by the exporter itself, as there).
func tracingEnv(e *envReader, set func(flag, value string, from ...string)) {
	set("tracing", strconv.FormatBool(e.boolean("TRACING_ENABLED", false)), "TRACING_ENABLED")
	if p, ok := e.oneOf("TRACING_EXPORTER_PROTOCOL", "http", "grpc"); ok {
		set("tracing-protocol", p, "TRACING_EXPORTER_PROTOCOL")
	}
	set("tracing-service-name", e.str("TRACING_SERVICE_NAME", "RateLimit"), "TRACING_SERVICE_NAME")
	set("tracing-service-namespace", e.str("TRACING_SERVICE_NAMESPACE", ""), "TRACING_SERVICE_NAMESPACE")
	set("tracing-service-instance-id", e.str("TRACING_SERVICE_INSTANCE_ID", ""), "TRACING_SERVICE_INSTANCE_ID")
	set("tracing-sampling-rate", strconv.FormatFloat(e.float("TRACING_SAMPLING_RATE", 1), 'g', -1, 64), "TRACING_SAMPLING_RATE")
}
