package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxDetailedSeries caps the descriptor series that detailed_metric
// may add (one per distinct request value): beyond it a value is counted
// under its descriptor's plain key, so that a client sending a new value
// each time cannot grow the metrics without bound.
const DefaultMaxDetailedSeries = 1000

// rlsMetrics are the Prometheus series of one `portero rls`. Labels have
// bounded cardinality: domain and key come from the configuration (a
// descriptor's keys and configured values, envoyproxy/ratelimit's stat
// key without the request's values), outcome from the engine's fixed set;
// a request's values appear only where the configuration marks the
// descriptor detailed_metric, and then at most maxDetailed series.
type rlsMetrics struct {
	reg     *prometheus.Registry
	reloads *prometheus.CounterVec
	domains prometheus.Gauge

	decisions     *prometheus.CounterVec // domain, key, outcome
	failurePolicy *prometheus.CounterVec // domain, key, policy
	calls         *prometheus.CounterVec // door, result
	storeLatency  prometheus.Histogram
	storeErrors   prometheus.Counter
	fallback      atomic.Bool
	dropped       prometheus.Counter

	// series caches each (domain, key)'s counters, so that a decision
	// looks up one map entry instead of hashing label values per outcome.
	series      sync.Map // seriesKey → *keySeries
	maxDetailed int64
	detailed    atomic.Int64 // detailed series made so far
}

type seriesKey struct{ domain, key string }

// rlsOutcomes are the engine's outcomes, in the order of keySeries.c.
var rlsOutcomes = [...]string{"allowed", "near-limit", "refused", "shadow-refused", "not-counted", "check-only", "can-never-pass"}

// rlsPolicies are the failure policies that decide (FailError answers no
// decision), in the order of keySeries.p.
var rlsPolicies = [...]string{"allow", "deny", "local"}

// keySeries are one descriptor key's counters: by outcome, made when the
// key is first seen (so that rates start from zero), and by failure
// policy, made when first needed.
type keySeries struct {
	domain, key string
	c           [len(rlsOutcomes)]prometheus.Counter
	p           [len(rlsPolicies)]atomic.Pointer[prometheus.Counter]
}

func newRLSMetrics(maxDetailed int, connected func() float64) *rlsMetrics {
	if maxDetailed <= 0 {
		maxDetailed = DefaultMaxDetailedSeries
	}
	m := &rlsMetrics{reg: newRegistry(), maxDetailed: int64(maxDetailed)}
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_config_reloads_total",
		Help: "Configuration reloads by result (ok, error).",
	}, []string{"result"})
	m.domains = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "portero_rls_config_domains",
		Help: "Domains in the running envoyproxy/ratelimit configuration.",
	})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_rls_decisions_total",
		Help: "Descriptor decisions by domain, descriptor key (envoyproxy/ratelimit's stat key, values only with detailed_metric) and outcome (allowed, near-limit, refused, shadow-refused, not-counted, check-only, can-never-pass).",
	}, []string{"domain", "key", "outcome"})
	m.failurePolicy = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_rls_failure_policy_decisions_total",
		Help: "Descriptor decisions the failure policy made (allow, deny, local) because the store failed, by domain and key.",
	}, []string{"domain", "key", "policy"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_rls_calls_total",
		Help: "Calls by door (grpc, http) and result (ok, over_limit, invalid, not_found, unavailable, canceled).",
	}, []string{"door", "result"})
	m.storeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "portero_store_latency_seconds",
		Help:    "Time the engine and the store took to decide all the descriptors of one call.",
		Buckets: []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1},
	})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "portero_store_errors_total",
		Help: "Calls the store failed to decide (the failure policy answered, or the call failed under error).",
	})
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "portero_rls_detailed_series_dropped_total",
		Help: "Decisions of detailed_metric descriptors counted under the plain key because the detailed series reached their cap.",
	})
	fallback := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "portero_store_fallback",
		Help: "1 while the store is failing and the failure policy decides instead of the limits; 0 when healthy.",
	}, func() float64 {
		if m.fallback.Load() {
			return 1
		}
		return 0
	})
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "portero_store_connected",
		Help: "1 once the store has reached its backend (always for the memory store); 0 while a Redis store started during an outage has not.",
	}, connected)
	m.reg.MustRegister(m.reloads, m.domains, m.decisions, m.failurePolicy, m.calls, m.storeLatency, m.storeErrors, m.dropped, fallback, up)
	return m
}

// key returns the series of (domain, key). A detailed key (one that holds
// a request's values) beyond the cap is replaced by plain, the key without
// them.
func (m *rlsMetrics) key(domain, key, plain string) *keySeries {
	sk := seriesKey{domain, key}
	if v, ok := m.series.Load(sk); ok {
		return v.(*keySeries)
	}
	if key != plain {
		if m.detailed.Add(1) > m.maxDetailed {
			m.detailed.Add(-1)
			m.dropped.Inc()
			return m.key(domain, plain, plain)
		}
	}
	ks := &keySeries{domain: domain, key: key}
	for i, o := range rlsOutcomes {
		ks.c[i] = m.decisions.WithLabelValues(domain, key, o)
	}
	v, loaded := m.series.LoadOrStore(sk, ks)
	if loaded && key != plain {
		m.detailed.Add(-1) // another call made it first
	}
	return v.(*keySeries)
}

// decision counts one descriptor's outcome, and the failure policy that
// decided it when one did (policy "" when the store decided).
func (m *rlsMetrics) decision(ks *keySeries, outcome, policy string) {
	for i, o := range rlsOutcomes {
		if o == outcome {
			ks.c[i].Inc()
			break
		}
	}
	if policy == "" {
		return
	}
	for i, p := range rlsPolicies {
		if p != policy {
			continue
		}
		c := ks.p[i].Load()
		if c == nil {
			nc := m.failurePolicy.WithLabelValues(ks.domain, ks.key, p)
			ks.p[i].CompareAndSwap(nil, &nc)
			c = ks.p[i].Load()
		}
		(*c).Inc()
		return
	}
}

// call counts one call's result and the time the decision took.
func (m *rlsMetrics) call(door, result string, took time.Duration, degraded bool) {
	m.calls.WithLabelValues(door, result).Inc()
	if took > 0 {
		m.storeLatency.Observe(took.Seconds())
	}
	if m.fallback.Load() != degraded {
		m.fallback.Store(degraded)
	}
}
