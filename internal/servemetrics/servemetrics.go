// Package servemetrics is what `portero serve` tells an operator about its
// decisions: its Prometheus series, the sampled refusal log lines, and the
// keys refused most and closest to their limits that /api/refused and the
// dashboard show. The gateway's hooks feed an Observer.
//
// Labels have bounded cardinality: rule and upstream names come from the
// configuration, outcomes and reasons from fixed sets. A client key is
// never a label (the refused-keys list is where those go).
package servemetrics

import (
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/admin"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/logging"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// Options configure an Observer; every field may be left zero.
type Options struct {
	// Logger receives the refusal and error lines; nil means
	// slog.Default().
	Logger *slog.Logger
	// Now is the decisions' clock; nil means time.Now.
	Now func() time.Time
	// Degraded reports whether the store answers from its failure policy.
	Degraded func() bool
	// Sampler bounds the refusal lines per rule; nil means
	// logging.DefaultPerSecond a second.
	Sampler *logging.Sampler
}

// Observer turns the gateway's decisions into metrics, logs and the
// dashboard's lists. Its methods are safe for concurrent use.
type Observer struct {
	o   Options
	reg *prometheus.Registry

	decisions    *prometheus.CounterVec
	storeLatency prometheus.Histogram
	storeErrors  prometheus.Counter
	fallback     atomic.Bool // exported as the gauge portero_store_fallback
	reloads      *prometheus.CounterVec
	proxyErrors  *prometheus.CounterVec
	configRules  prometheus.Gauge
	// failurePolicy counts the rule decisions the failure policy made
	// (engine.Result.Failure) instead of the store.
	failurePolicy *prometheus.CounterVec
	// quotaUsed observes, at every decision of a calendar quota, the share
	// of it the key had used: "some client has nearly spent its quota"
	// without a client as a label.
	quotaUsed *prometheus.HistogramVec
	shed      *prometheus.CounterVec

	storeWarns *logging.Sampler // the store-error log lines: one a second
	counters   atomic.Pointer[ruleCounters]
	refused    dashboard.Refused
	usage      *dashboard.Usage
}

// New returns an Observer with its series registered on a registry of
// admin.NewRegistry.
func New(o Options) *Observer {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Degraded == nil {
		o.Degraded = func() bool { return false }
	}
	if o.Sampler == nil {
		o.Sampler = logging.NewSampler(logging.DefaultPerSecond)
	}
	m := &Observer{o: o, reg: admin.NewRegistry(), usage: dashboard.NewUsage(0), reloads: admin.NewReloads(), storeWarns: logging.NewSampler(1)}
	counters := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m.decisions = counters("portero_decisions_total",
		"Decisions by rule and outcome (allowed, near-limit, refused, shadow-refused, not-counted, check-only, can-never-pass).", "rule", "outcome")
	m.failurePolicy = counters("portero_failure_policy_decisions_total",
		"Rule decisions made by the failure policy (on_error allow, deny or local) instead of the shared count, by rule; their RateLimit values are not sent.", "rule")
	m.proxyErrors = counters("portero_upstream_errors_total", "Requests an upstream did not answer properly (502/504), by upstream.", "upstream")
	m.shed = counters("portero_shed_total",
		"Requests the overload section refused with 503 for the service's sake, by reason (full, evicted, late, unhealthy).", "reason")
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "portero_store_errors_total",
		Help: "Requests the store failed to decide (the failure policy then let them pass or answered 503)."})
	m.storeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "portero_store_latency_seconds",
		Help: "Time the store took to decide all the rules of one request.", Buckets: admin.StoreLatencyBuckets})
	m.configRules = prometheus.NewGauge(prometheus.GaugeOpts{Name: "portero_config_rules", Help: "Number of rules in the running configuration."})
	m.quotaUsed = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "portero_quota_used_ratio",
		Help:    "Share of a calendar quota the key had used at each decision, by rule (no client label: alert on the upper buckets).",
		Buckets: []float64{0.5, 0.8, 0.9, 0.95, 0.99, 1}}, []string{"rule"})
	fallback := admin.NewFallbackGauge(&m.fallback, "1 while the store is failing and the failure policy (on_error) decides instead of the limits; 0 when healthy.")
	m.reg.MustRegister(m.decisions, m.storeLatency, m.storeErrors, m.failurePolicy, fallback, m.quotaUsed, m.reloads, m.proxyErrors, m.configRules, m.shed)
	return m
}

// Registry is where the series are registered: what /metrics serves.
func (m *Observer) Registry() *prometheus.Registry { return m.reg }

// Refused is the list of the keys refused most.
func (m *Observer) Refused() *dashboard.Refused { return &m.refused }

// Reloaded counts a reload, applied when err is nil.
func (m *Observer) Reloaded(err error) {
	if err != nil {
		m.reloads.WithLabelValues("error").Inc()
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
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

// SetPolicy prepares the counters of p's rules: the server calls it for
// every configuration it runs.
func (m *Observer) SetPolicy(p *policy.Policy) {
	rules := make([]*engine.Rule, len(p.Rules()))
	names := make([]string, len(rules))
	t := &ruleCounters{rules: rules, c: make([][len(outcomes)]prometheus.Counter, len(rules))}
	for i, r := range p.Rules() {
		rules[i], names[i] = r.Engine(), r.Name
		for j, out := range outcomes {
			t.c[i][j] = m.decisions.WithLabelValues(r.Name, out.String())
		}
	}
	m.counters.Store(t)
	m.usage.SetRules(names)
	m.configRules.Set(float64(len(rules)))
}

// decision returns the counter of res, from the table when res comes from
// the current policy.
func (m *Observer) decision(res *engine.Result) prometheus.Counter {
	if t := m.counters.Load(); t != nil {
		if i := res.Rule.Index; i >= 0 && i < len(t.rules) && t.rules[i] == res.Rule {
			for j, out := range outcomes {
				if out == res.Outcome {
					return t.c[i][j]
				}
			}
		}
	}
	return m.decisions.WithLabelValues(res.Rule.Name, res.Outcome.String())
}

// OnDecision is the gateway's OnDecision hook.
func (m *Observer) OnDecision(r *http.Request, v *engine.Verdict, took time.Duration) {
	m.storeLatency.Observe(took.Seconds())
	if fb := m.o.Degraded(); m.fallback.Load() != fb {
		m.fallback.Store(fb)
	}
	for i := range v.Results {
		res := &v.Results[i]
		m.decision(res).Inc()
		if res.Failure != "" {
			m.failurePolicy.WithLabelValues(res.Rule.Name).Inc()
		} else {
			d := &res.Decision
			if d.Quota && d.Limit > 0 {
				m.quotaUsed.WithLabelValues(res.Rule.Name).Observe(float64(d.Limit-d.Remaining) / float64(d.Limit))
			}
			if res.Outcome == engine.Allowed || res.Outcome == engine.NearLimit || res.Outcome == engine.Refused {
				// Cheap below the rule's few keys nearest their limit.
				if u := m.usage.Rule(res.Rule.Index); u.Wants(d.Limit-d.Remaining, d.Limit) {
					u.Observe(res.Key, d.Limit-d.Remaining, d.Limit, d.ResetAfter, m.o.Now())
				}
			}
		}
		switch {
		case res.Outcome == engine.ShadowRefused:
			m.refusal(r, res, "shadow rule would refuse", " (shadow)")
		case res.Outcome != engine.Refused && res.Outcome != engine.CanNeverPass || res.Rule.Shadow:
		case res.Failure != "":
			// The store failed and the failure policy refused: not the
			// key's doing, so neither the rule's refusal nor a key refused.
			if ok, n := m.sample(r, res.Rule.Name+" (failure policy)"); ok {
				m.o.Logger.Info("refused by the failure policy: the store is unavailable", "rule", res.Rule.Name, "on_error", string(res.Failure),
					"method", r.Method, "path", r.URL.Path, "suppressed", n)
			}
		default:
			m.refusal(r, res, "refused", "")
		}
	}
}

// refusal notes a refusal of res's key in the list and, sampled per rule,
// in the log.
func (m *Observer) refusal(r *http.Request, res *engine.Result, msg, kind string) {
	m.refused.Add(res.Rule.Name, res.Key, kind != "", m.o.Now())
	if ok, n := m.sample(r, res.Rule.Name+kind); ok {
		args := []any{"rule", res.Rule.Name, "key", res.Key, "method", r.Method, "path", r.URL.Path}
		if kind == "" {
			args = append(args, "retry_after", res.Decision.RetryAfter)
		}
		m.o.Logger.Info(msg, append(args, "suppressed", n)...)
	}
}

// sample reports whether a line of name may be logged now, and how many
// were held back since the last one: a flood of refusals is a few lines a
// second. The level is asked first, so that at one that drops the line a
// refusal does not pay the sampler's lock for nothing.
func (m *Observer) sample(r *http.Request, name string) (bool, int64) {
	if !m.o.Logger.Enabled(r.Context(), slog.LevelInfo) {
		return false, 0
	}
	return m.o.Sampler.Allow(name, m.o.Now())
}

// OnError is the gateway's OnError hook.
func (m *Observer) OnError(r *http.Request, err error) {
	var re *policy.RuleError
	if errors.As(err, &re) {
		m.o.Logger.Debug("request cost unusable", "rule", re.Rule, "err", err, "path", r.URL.Path)
		return
	}
	m.storeErrors.Inc()
	m.fallback.Store(true)
	// A dead store must not flood the log.
	if ok, n := m.storeWarns.Allow("", time.Now()); ok {
		m.o.Logger.Warn("store failed; the failure policy decides", "err", err, "suppressed", n)
	}
}

// OnShed is the gateway's OnShed hook.
func (m *Observer) OnShed(_ *http.Request, ref *overload.Refusal) {
	m.shed.WithLabelValues(ref.Reason.String()).Inc()
}

// OnProxyError is the gateway's OnProxyError hook.
func (m *Observer) OnProxyError(r *http.Request, upstream string, err error) {
	m.proxyErrors.WithLabelValues(upstream).Inc()
	m.o.Logger.Warn("upstream error", "upstream", upstream, "method", r.Method, "path", r.URL.Path, "err", err)
}
