package server

import (
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/logging"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// metrics are the Prometheus series of one server. Labels have bounded
// cardinality: rule names come from the configuration, outcomes and results
// from fixed sets, upstream names from the configuration. A client key is
// never a label (see the admin API's refused list for those).
type metrics struct {
	reg          *prometheus.Registry
	decisions    *prometheus.CounterVec
	storeLatency prometheus.Histogram
	storeErrors  prometheus.Counter
	fallback     atomic.Bool // exported as the gauge portero_store_fallback
	reloads      *prometheus.CounterVec
	proxyErrors  *prometheus.CounterVec
	configRules  prometheus.Gauge

	// failurePolicy counts rule decisions made by the failure policy
	// (engine.Result.Failure) instead of the store, by rule.
	failurePolicy *prometheus.CounterVec
	// quotaUsed observes, for every decision of a calendar quota, the
	// share of the quota the key had used: "some client has nearly spent
	// its quota" without a client key as a label.
	quotaUsed *prometheus.HistogramVec
	// shed counts the requests the overload section refused, by reason.
	shed *prometheus.CounterVec
}

// storeLatencyBuckets are portero_store_latency_seconds's buckets, the
// same for serve and rls: the dashboard reads its quantiles from them.
var storeLatencyBuckets = []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1}

// newReloads makes portero_config_reloads_total, the same for serve and rls.
func newReloads() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_config_reloads_total",
		Help: "Configuration reloads by result (ok, error).",
	}, []string{"result"})
}

// newFallbackGauge makes portero_store_fallback from flag. A GaugeFunc, so
// that requests only write the flag when it changes (one shared cache line
// written by every request costs throughput).
func newFallbackGauge(flag *atomic.Bool, help string) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "portero_store_fallback", Help: help}, func() float64 {
		if flag.Load() {
			return 1
		}
		return 0
	})
}

func newMetrics() *metrics {
	m := &metrics{reg: newRegistry()}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_decisions_total",
		Help: "Decisions by rule and outcome (allowed, near-limit, refused, shadow-refused, not-counted, check-only, can-never-pass).",
	}, []string{"rule", "outcome"})
	m.storeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "portero_store_latency_seconds",
		Help:    "Time the store took to decide all the rules of one request.",
		Buckets: storeLatencyBuckets,
	})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "portero_store_errors_total",
		Help: "Requests the store failed to decide (the failure policy then let them pass or answered 503).",
	})
	m.failurePolicy = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_failure_policy_decisions_total",
		Help: "Rule decisions made by the failure policy (on_error allow, deny or local) instead of the shared count, by rule; their RateLimit values are not sent.",
	}, []string{"rule"})
	fallback := newFallbackGauge(&m.fallback, "1 while the store is failing and the failure policy (on_error) decides instead of the limits; 0 when healthy.")
	m.reloads = newReloads()
	m.proxyErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_upstream_errors_total",
		Help: "Requests an upstream did not answer properly (502/504), by upstream.",
	}, []string{"upstream"})
	m.configRules = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "portero_config_rules",
		Help: "Number of rules in the running configuration.",
	})
	m.quotaUsed = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "portero_quota_used_ratio",
		Help:    "Share of a calendar quota the key had used at each decision, by rule (no client label: alert on the upper buckets).",
		Buckets: []float64{0.5, 0.8, 0.9, 0.95, 0.99, 1},
	}, []string{"rule"})
	m.shed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_shed_total",
		Help: "Requests the overload section refused with 503 for the service's sake, by reason (full, evicted, late, unhealthy).",
	}, []string{"reason"})
	m.reg.MustRegister(m.decisions, m.storeLatency, m.storeErrors, m.failurePolicy, fallback, m.quotaUsed, m.reloads, m.proxyErrors, m.configRules, m.shed)
	return m
}

// observer turns decisions into metrics, logs and the refused-keys list.
type observer struct {
	m        *metrics
	log      *slog.Logger
	refused  *refusals
	now      func() time.Time
	degraded func() bool      // the store answers from its failure policy
	sample   *logging.Sampler // refusal lines per rule and second
	lastWarn atomic.Int64     // unix ns of the last store-error log line
	counters atomic.Pointer[ruleCounters]
	usage    *dashboard.Usage // the keys closest to their limits, for the dashboard
}

// outcomes are the engine's outcomes, in the order of ruleCounters.c.
var outcomes = [...]engine.Outcome{engine.Allowed, engine.NearLimit, engine.Refused, engine.ShadowRefused, engine.NotCounted, engine.CheckOnly, engine.CanNeverPass}

// ruleCounters holds the decision counters of one policy's rules, looked
// up once per configuration rather than hashed by label values on every
// request.
type ruleCounters struct {
	rules []*engine.Rule // by Index
	c     [][len(outcomes)]prometheus.Counter
}

// setPolicy prepares the counters of p's rules; the server calls it for
// every configuration it runs.
func (o *observer) setPolicy(p *policy.Policy) {
	rules := make([]*engine.Rule, len(p.Rules()))
	for i, r := range p.Rules() {
		rules[i] = r.Engine()
	}
	t := &ruleCounters{rules: rules, c: make([][len(outcomes)]prometheus.Counter, len(rules))}
	for i, r := range rules {
		for j, out := range outcomes {
			t.c[i][j] = o.m.decisions.WithLabelValues(r.Name, out.String())
		}
	}
	o.counters.Store(t)
	if o.usage != nil {
		names := make([]string, len(rules))
		for i, r := range rules {
			names[i] = r.Name
		}
		o.usage.SetRules(names)
	}
}

// decision returns the counter of res, from the table when res comes from
// the current policy.
func (o *observer) decision(res *engine.Result) prometheus.Counter {
	if t := o.counters.Load(); t != nil {
		if i := res.Rule.Index; i >= 0 && i < len(t.rules) && t.rules[i] == res.Rule {
			for j, out := range outcomes {
				if out == res.Outcome {
					return t.c[i][j]
				}
			}
		}
	}
	return o.m.decisions.WithLabelValues(res.Rule.Name, res.Outcome.String())
}

func (o *observer) onDecision(r *http.Request, v *engine.Verdict, took time.Duration) {
	o.m.storeLatency.Observe(took.Seconds())
	if fb := o.degraded != nil && o.degraded(); o.m.fallback.Load() != fb {
		o.m.fallback.Store(fb)
	}
	for i := range v.Results {
		res := &v.Results[i]
		o.decision(res).Inc()
		if res.Failure != "" {
			o.m.failurePolicy.WithLabelValues(res.Rule.Name).Inc()
		} else {
			d := &res.Decision
			if d.Quota && d.Limit > 0 {
				o.m.quotaUsed.WithLabelValues(res.Rule.Name).Observe(float64(d.Limit-d.Remaining) / float64(d.Limit))
			}
			if o.usage != nil && (res.Outcome == engine.Allowed || res.Outcome == engine.NearLimit || res.Outcome == engine.Refused) {
				// What the key has used of its limit, for the dashboard;
				// cheap below the rule's few nearest keys.
				if u := o.usage.Rule(res.Rule.Index); u.Wants(d.Limit-d.Remaining, d.Limit) {
					u.Observe(res.Key, d.Limit-d.Remaining, d.Limit, d.ResetAfter, o.now())
				}
			}
		}
		switch res.Outcome {
		case engine.Refused, engine.CanNeverPass:
			if res.Rule.Shadow {
				continue
			}
			now := o.now()
			if res.Failure != "" {
				// The store failed and the failure policy refused: not this
				// key's doing, so neither a refusal of the rule's nor one of
				// the keys refused most.
				if o.log.Enabled(r.Context(), slog.LevelInfo) {
					if ok, n := o.sample.Allow(res.Rule.Name+" (failure policy)", now); ok {
						o.log.Info("refused by the failure policy: the store is unavailable", "rule", res.Rule.Name, "on_error", string(res.Failure),
							"method", r.Method, "path", r.URL.Path, "suppressed", n)
					}
				}
				continue
			}
			o.refused.add(res.Rule.Name, res.Key, false, now)
			// Sampled per rule: a flood of refusals is a few lines a
			// second, each saying how many it stands for. The level is
			// asked first: at one that drops the line, every refusal
			// would otherwise pay the sampler's lock for nothing.
			if !o.log.Enabled(r.Context(), slog.LevelInfo) {
				break
			}
			if ok, n := o.sample.Allow(res.Rule.Name, now); ok {
				o.log.Info("refused", "rule", res.Rule.Name, "key", res.Key, "method", r.Method, "path", r.URL.Path,
					"retry_after", res.Decision.RetryAfter, "suppressed", n)
			}
		case engine.ShadowRefused:
			now := o.now()
			o.refused.add(res.Rule.Name, res.Key, true, now)
			if !o.log.Enabled(r.Context(), slog.LevelInfo) {
				break
			}
			if ok, n := o.sample.Allow(res.Rule.Name+" (shadow)", now); ok {
				o.log.Info("shadow rule would refuse", "rule", res.Rule.Name, "key", res.Key, "method", r.Method, "path", r.URL.Path,
					"suppressed", n)
			}
		}
	}
}

func (o *observer) onError(r *http.Request, err error) {
	var re *policy.RuleError
	if errors.As(err, &re) {
		o.log.Debug("request cost unusable", "rule", re.Rule, "err", err, "path", r.URL.Path)
		return
	}
	o.m.storeErrors.Inc()
	o.m.fallback.Store(true)
	// At most one log line a second: a dead store must not flood the log.
	now := time.Now().UnixNano()
	if last := o.lastWarn.Load(); now-last > int64(time.Second) && o.lastWarn.CompareAndSwap(last, now) {
		o.log.Warn("store failed; the failure policy decides", "err", err)
	}
}

func (o *observer) onShed(_ *http.Request, ref *overload.Refusal) {
	o.m.shed.WithLabelValues(ref.Reason.String()).Inc()
}

func (o *observer) onProxyError(r *http.Request, upstream string, err error) {
	o.m.proxyErrors.WithLabelValues(upstream).Inc()
	o.log.Warn("upstream error", "upstream", upstream, "method", r.Method, "path", r.URL.Path, "err", err)
}

// refusals counts refused keys per minute over the last few minutes, with a
// bounded number of distinct keys per minute.
type refusals struct {
	mu      sync.Mutex
	buckets [refusalMinutes]refusalBucket
}

const (
	refusalMinutes = 15
	refusalMaxKeys = 10000
)

type refusalBucket struct {
	minute  int64
	counts  map[refusalKey]int64
	dropped int64
}

type refusalKey struct {
	rule, key string
	shadow    bool
}

func (rf *refusals) add(rule, key string, shadow bool, now time.Time) {
	min := now.Unix() / 60
	rf.mu.Lock()
	defer rf.mu.Unlock()
	b := &rf.buckets[min%refusalMinutes]
	if b.minute != min || b.counts == nil {
		*b = refusalBucket{minute: min, counts: map[refusalKey]int64{}}
	}
	k := refusalKey{rule, key, shadow}
	if _, ok := b.counts[k]; !ok && len(b.counts) >= refusalMaxKeys {
		b.dropped++
		return
	}
	b.counts[k]++
}

// RefusedKey is one entry of the refused-keys list.
type RefusedKey struct {
	Rule   string `json:"rule"`
	Key    string `json:"key"`
	Shadow bool   `json:"shadow,omitempty"`
	Count  int64  `json:"count"`
}

// top returns the keys refused most in the last minutes (1 to 15), at most
// n of them.
func (rf *refusals) top(now time.Time, minutes, n int) []RefusedKey {
	minutes = min(max(minutes, 1), refusalMinutes)
	cur := now.Unix() / 60
	sum := map[refusalKey]int64{}
	rf.mu.Lock()
	for i := range rf.buckets {
		b := &rf.buckets[i]
		if b.counts != nil && b.minute > cur-int64(minutes) && b.minute <= cur {
			for k, c := range b.counts {
				sum[k] += c
			}
		}
	}
	rf.mu.Unlock()
	out := make([]RefusedKey, 0, len(sum))
	for k, c := range sum {
		out = append(out, RefusedKey{Rule: k.rule, Key: k.key, Shadow: k.shadow, Count: c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		if out[i].Rule != out[j].Rule {
			return out[i].Rule < out[j].Rule
		}
		return out[i].Key < out[j].Key
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
