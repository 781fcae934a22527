package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/admin"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/store/budget"
)

// DefaultMaxDetailedSeries caps the descriptor keys that detailed_metric
// may add to the metrics (one per distinct request value): beyond it a
// value is counted under its descriptor's plain key, so that a client
// sending a new value each time cannot grow the metrics without bound.
const DefaultMaxDetailedSeries = 1000

// maxDetailedKey bounds one detailed key in bytes: longer ones are counted
// under the plain key (a descriptor's values may be 32 KiB).
const maxDetailedKey = 256

// rlsMetrics are the Prometheus series of one `portero rls`, fed by the
// engine's verdicts (rlsObserver). Labels have bounded cardinality: domain
// and key come from the configuration (envoyproxy/ratelimit's stat key,
// the descriptor's keys and configured values, without the request's
// values), outcome and policy from the engine's fixed sets, door and
// result from fixed sets; a request's values appear only where the
// configuration marks the descriptor detailed_metric, and then in at most
// maxDetailed keys.
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

	// byLimit caches each configured limit's series (*descriptor.Limit →
	// *keySeries), so that a decision costs one map load and no label
	// hashing; a reload clears it. detailed holds the detailed keys'
	// series, overrides those of limit overrides (whose keys come from
	// requests, and whose Limits come and go), each bounded.
	byLimit   sync.Map
	detailed  seriesSet
	overrides seriesSet

	// refused counts the refused keys of the last minutes, for the
	// dashboard (the same bounded list as serve's /api/refused).
	refused dashboard.Refused
	// usage keeps the keys closest to their limits, for the dashboard, of
	// the configured limits (usageOf: their trackers, per configuration);
	// now is the decisions' clock.
	usage   *dashboard.Usage
	usageOf atomic.Pointer[map[*descriptor.Limit]*dashboard.RuleUsage]
	now     func() time.Time
}

// keySeries are one descriptor key's counters: by outcome (engine.Outcome
// − 1), made when the key is first seen so that rates start from zero,
// and by failure policy, made when first needed.
type keySeries struct {
	domain, key string
	c           [int(engine.CanNeverPass)]prometheus.Counter
	p           sync.Map // portero.FailurePolicy → prometheus.Counter
}

// rlsResults are the values of portero_rls_calls_total's result label.
var rlsResults = [...]string{"ok", "over_limit", "invalid", "not_found", "unavailable", "canceled", "error"}

func newRLSMetrics(maxDetailed int, connected func() float64, budgets func() (budget.Stats, bool)) *rlsMetrics {
	if maxDetailed <= 0 {
		maxDetailed = DefaultMaxDetailedSeries
	}
	m := &rlsMetrics{reg: admin.NewRegistry(), detailed: seriesSet{max: int64(maxDetailed)},
		overrides: seriesSet{max: maxOverrideSeries}, usage: dashboard.NewUsage(0), now: time.Now}
	m.usageOf.Store(&map[*descriptor.Limit]*dashboard.RuleUsage{})
	m.reloads = admin.NewReloads()
	m.domains = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "portero_rls_config_domains",
		Help: "Domains in the running envoyproxy/ratelimit configuration.",
	})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_rls_decisions_total",
		Help: "Descriptor decisions by domain, descriptor key (envoyproxy/ratelimit's stat key; request values only with detailed_metric) and outcome (allowed, near-limit, refused, shadow-refused, not-counted, check-only, can-never-pass).",
	}, []string{"domain", "key", "outcome"})
	m.failurePolicy = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_rls_failure_policy_decisions_total",
		Help: "Descriptor decisions the failure policy made (allow, deny, local) because the store failed, by domain and key.",
	}, []string{"domain", "key", "policy"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_rls_calls_total",
		Help: "Calls by door (grpc, http) and result (ok, over_limit, invalid, not_found, unavailable, canceled, error).",
	}, []string{"door", "result"})
	for _, door := range []string{"grpc", "http"} {
		for _, r := range rlsResults {
			m.calls.WithLabelValues(door, r)
		}
	}
	m.storeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "portero_store_latency_seconds",
		Help:    "Time the engine and its store took to decide all the descriptors of one call.",
		Buckets: admin.StoreLatencyBuckets,
	})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "portero_store_errors_total",
		Help: "Calls the store failed to decide (the failure policy answered, or the call failed under error).",
	})
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "portero_rls_detailed_dropped_total",
		Help: "Decisions of detailed_metric descriptors counted under the plain key: the detailed keys reached --max-detailed-metrics, or the values were too long.",
	})
	fallback := admin.NewFallbackGauge(&m.fallback, "1 while the store is failing and the failure policy decides instead of the limits; 0 when healthy.")
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "portero_store_connected",
		Help: "1 once the store has reached its backend (always for the memory store); 0 while a Redis store started during an outage has not.",
	}, connected)
	m.reg.MustRegister(m.reloads, m.domains, m.decisions, m.failurePolicy, m.calls, m.storeLatency, m.storeErrors, m.dropped, fallback, up)
	admin.RegisterBudgets(m.reg, budgets)
	return m
}

func (m *rlsMetrics) newSeries(domain, key string) *keySeries {
	ks := &keySeries{domain: domain, key: key}
	for i := range ks.c {
		ks.c[i] = m.decisions.WithLabelValues(domain, key, engine.Outcome(i+1).String())
	}
	return ks
}

// plain returns the series of limit l in domain: its stat key without
// the domain.
func (m *rlsMetrics) plain(domain string, l *descriptor.Limit) *keySeries {
	if v, ok := m.byLimit.Load(l); ok {
		return v.(*keySeries)
	}
	v, _ := m.byLimit.LoadOrStore(l, m.newSeries(domain, strings.TrimPrefix(l.FullKey, domain+".")))
	return v.(*keySeries)
}

// withValues returns the series of a detailed_metric limit for the
// request's entries: envoyproxy/ratelimit's per-value key (key_value for
// each entry, joined by "."), or the plain key once maxDetailed keys exist.
func (m *rlsMetrics) withValues(domain string, l *descriptor.Limit, entries []descriptor.Entry) *keySeries {
	key := descriptor.Key(entries)
	if len(key) <= maxDetailedKey {
		if ks := m.detailed.get(m, domain, key, true); ks != nil {
			return ks
		}
	}
	m.dropped.Inc()
	return m.plain(domain, l)
}

// maxOverrideSeries caps the descriptor keys that limit overrides add to
// the metrics (the keys come from requests); beyond it overrides are
// counted under the key overflowKey.
const maxOverrideSeries = 1024

// overflowKey is the key of the limit overrides past maxOverrideSeries.
const overflowKey = "(override)"

// override returns the series of limit override l: its stat key, or
// overflowKey once maxOverrideSeries keys exist or for a key longer than
// maxDetailedKey.
func (m *rlsMetrics) override(domain string, l *descriptor.Limit) *keySeries {
	if key := strings.TrimPrefix(l.FullKey, domain+"."); len(key) <= maxDetailedKey {
		if ks := m.overrides.get(m, domain, key, true); ks != nil {
			return ks
		}
	}
	return m.overrides.get(m, domain, overflowKey, false)
}

// seriesSet holds series by domain and key (domain + "\x00" + key →
// *keySeries), at most max of them.
type seriesSet struct {
	m   sync.Map
	n   atomic.Int64
	max int64
}

// get returns the series of (domain, key), made if the set has room or it
// is not capped (an overflow key, outside the count); nil when it has none.
func (s *seriesSet) get(m *rlsMetrics, domain, key string, capped bool) *keySeries {
	sk := domain + "\x00" + key
	if v, ok := s.m.Load(sk); ok {
		return v.(*keySeries)
	}
	if capped && s.n.Add(1) > s.max {
		s.n.Add(-1)
		return nil
	}
	v, loaded := s.m.LoadOrStore(sk, m.newSeries(domain, key))
	if loaded && capped {
		s.n.Add(-1) // another call made it first
	}
	return v.(*keySeries)
}

// count counts one decision of ks.
func (m *rlsMetrics) count(ks *keySeries, res *engine.Result) {
	if i := int(res.Outcome) - 1; i >= 0 && i < len(ks.c) {
		ks.c[i].Inc()
	}
	if res.Failure == "" {
		return
	}
	c, ok := ks.p.Load(res.Failure)
	if !ok {
		c, _ = ks.p.LoadOrStore(res.Failure, m.failurePolicy.WithLabelValues(ks.domain, ks.key, string(res.Failure)))
	}
	c.(prometheus.Counter).Inc()
}

// setLimits prepares for the limits of c: it forgets the cached series
// of the previous configuration's (the counters themselves stay: the same
// labels are the same series) and tracks the keys closest to each limit
// under its dashboard name (a limit of the same name keeps its keys).
func (m *rlsMetrics) setLimits(c *descriptor.Config) {
	m.byLimit.Clear()
	var names []string
	var limits []*descriptor.Limit
	c.Walk(func(d *descriptor.Domain, n *descriptor.Node) {
		if l := n.Limit; l != nil && !l.Unlimited {
			names, limits = append(names, dashName(d.Name, l)), append(limits, l)
		}
	})
	m.usage.SetRules(names)
	byLimit := make(map[*descriptor.Limit]*dashboard.RuleUsage, len(limits))
	for i, l := range limits {
		byLimit[l] = m.usage.Rule(i)
	}
	m.usageOf.Store(&byLimit)
}

// dashName is the dashboard's name of limit l of domain: the domain and
// the stat key of its metrics.
func dashName(domain string, l *descriptor.Limit) string {
	return domain + " " + strings.TrimPrefix(l.FullKey, domain+".")
}

// rlsObserver feeds rlsMetrics from one door's verdicts: it is the
// descriptor.Observer of the gRPC service (door "grpc") and of the check
// API (door "http").
type rlsObserver struct {
	m       *rlsMetrics
	results [len(rlsResults)]prometheus.Counter
}

func (m *rlsMetrics) observer(door string) *rlsObserver {
	o := &rlsObserver{m: m}
	for i, r := range rlsResults {
		o.results[i] = m.calls.WithLabelValues(door, r)
	}
	return o
}

var _ descriptor.Observer = (*rlsObserver)(nil)

// Observe implements descriptor.Observer: the call's result, the store's
// latency and health, and each descriptor's outcome.
func (o *rlsObserver) Observe(req *descriptor.Request, p *descriptor.Plan, v *engine.Verdict, took time.Duration, err error) {
	m := o.m
	result, storeFailed := 0, false // ok
	switch {
	case err == nil:
		if !v.Allowed {
			result = 1
		}
		storeFailed = v.Degraded != nil
	case isRequestError(err, descriptor.InvalidArgument):
		result = 2
	case isRequestError(err, descriptor.NotFound):
		result = 3
	case errors.Is(err, portero.ErrStoreUnavailable):
		result, storeFailed = 4, true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		result = 5
	default:
		result = 6
	}
	o.results[result].Inc()
	if took > 0 {
		m.storeLatency.Observe(took.Seconds())
	}
	if storeFailed {
		m.storeErrors.Inc()
	}
	if took > 0 && m.fallback.Load() != storeFailed {
		// Written only when it changes: one shared cache line written by
		// every call would cost throughput.
		m.fallback.Store(storeFailed)
	}
	if err != nil {
		return
	}
	for i := range v.Results {
		res := &v.Results[i]
		if i >= len(p.Of) {
			break
		}
		d := p.Of[i]
		l := p.Descriptors[d].Limit
		if l == nil {
			continue
		}
		var ks *keySeries
		switch {
		case req.Descriptors[d].Override != nil:
			ks = m.override(req.Domain, l)
		case l.DetailedMetric:
			ks = m.withValues(req.Domain, l, req.Descriptors[d].Entries)
		default:
			ks = m.plain(req.Domain, l)
		}
		m.count(ks, res)
		if u := (*m.usageOf.Load())[l]; u != nil && res.Failure == "" &&
			(res.Outcome == engine.Allowed || res.Outcome == engine.NearLimit || res.Outcome == engine.Refused) {
			// What the key has used of its limit; cheap below the rule's
			// few nearest keys.
			if dd := &res.Decision; u.Wants(dd.Limit-dd.Remaining, dd.Limit) {
				u.Observe(res.Key, dd.Limit-dd.Remaining, dd.Limit, dd.ResetAfter, m.now())
			}
		}
		switch res.Outcome {
		case engine.Refused, engine.CanNeverPass, engine.ShadowRefused:
			m.refused.Add(ks.domain+" "+ks.key, res.Key, res.Rule.Shadow, time.Now())
		}
	}
}

func isRequestError(err error, kind descriptor.ErrorKind) bool {
	var re *descriptor.RequestError
	return errors.As(err, &re) && re.Kind == kind
}
