package admin

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/portero-rl/portero/internal/buildinfo"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/store/budget"
)

// NewRegistry returns a registry holding what every Portero server
// exports: portero_build_info (the data of `portero --version` and
// /api/version), and the Go runtime's and the process's collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	bi := buildinfo.Read()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "portero_build_info",
		Help:        "Always 1; the labels say which build runs: module version, VCS revision, Go release (as portero --version).",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	})
	info.Set(1)
	reg.MustRegister(info, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// StoreLatencyBuckets are portero_store_latency_seconds's buckets, the
// same for every command: the dashboard reads its quantiles from them.
var StoreLatencyBuckets = []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1}

// NewReloads makes portero_config_reloads_total.
func NewReloads() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portero_config_reloads_total",
		Help: "Configuration reloads by result (ok, error).",
	}, []string{"result"})
}

// NewFallbackGauge makes portero_store_fallback from flag. A GaugeFunc, so
// that requests write the flag only when it changes (one cache line
// written by every request costs throughput).
func NewFallbackGauge(flag *atomic.Bool, help string) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "portero_store_fallback", Help: help}, func() float64 {
		if flag.Load() {
			return 1
		}
		return 0
	})
}

// DashMetrics are the series a command's dashboard reads: the reloads,
// the store's errors and fallback, the decision counters (the family
// Decisions, whose Labels name a rule, and FailurePolicy), the store
// latency, and the lists of keys refused most and closest to their limits.
type DashMetrics struct {
	Registry                 *prometheus.Registry
	Reloads                  *prometheus.CounterVec
	StoreErrors              prometheus.Counter
	Fallback                 *atomic.Bool
	Refused                  *dashboard.Refused
	Usage                    *dashboard.Usage
	Decisions, FailurePolicy string
	Labels                   []string
}

// Snapshot is what d knows of the dashboard at now, and the decision
// counts by rule (its Labels' values joined by "\x00") and outcome.
func (d DashMetrics) Snapshot(now time.Time) (dashboard.Snapshot, map[string]map[string]float64) {
	snap := dashboard.Snapshot{
		Config: dashboard.Config{Reloads: int64(readCounter(d.Reloads.WithLabelValues("ok"))),
			ReloadErrors: int64(readCounter(d.Reloads.WithLabelValues("error")))},
		TopRefused:       d.Refused.Top(now, 5, 20),
		TopRefusedWindow: "5 min",
		Usage:            d.Usage.Top(now),
		Store:            dashboard.Store{Fallback: d.Fallback.Load(), Errors: readCounter(d.StoreErrors)},
	}
	counts := map[string]map[string]float64{}
	mfs, _ := d.Registry.Gather()
	for _, mf := range mfs {
		switch mf.GetName() {
		case d.Decisions:
			for _, x := range mf.GetMetric() {
				rule := make([]string, len(d.Labels))
				for i, l := range d.Labels {
					rule[i] = Label(x, l)
				}
				k := strings.Join(rule, "\x00")
				if counts[k] == nil {
					counts[k] = map[string]float64{}
				}
				counts[k][Label(x, "outcome")] = x.GetCounter().GetValue()
			}
		case d.FailurePolicy:
			for _, x := range mf.GetMetric() {
				snap.Store.FallbackDecisions += x.GetCounter().GetValue()
			}
		case "portero_store_latency_seconds":
			if ms := mf.GetMetric(); len(ms) == 1 {
				h := ms[0].GetHistogram()
				snap.Store.Latency.Count, snap.Store.Latency.Sum = h.GetSampleCount(), h.GetSampleSum()
				for _, b := range h.GetBucket() {
					snap.Store.Latency.Bounds = append(snap.Store.Latency.Bounds, b.GetUpperBound())
					snap.Store.Latency.Counts = append(snap.Store.Latency.Counts, b.GetCumulativeCount())
				}
				snap.Requests = float64(h.GetSampleCount())
			}
		}
	}
	return snap, counts
}

func readCounter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// Label returns the value of a series' label name ("" when it has none).
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// NodeState is one part of a shared store, as portero_store_node_unavailable
// sees it: the Redis server, or a Redis Cluster master and its slots.
type NodeState struct {
	Node, Slots string
	Unavailable bool
}

// NewNodeGauge makes portero_store_node_unavailable, one series per part of
// the shared store that nodes reports at each scrape (none for the memory
// store), so that one dead cluster master shows as itself while the others
// decide. Its labels are bounded by the cluster's masters.
func NewNodeGauge(nodes func() []NodeState) prometheus.Collector {
	return nodeGauge{nodes, prometheus.NewDesc("portero_store_node_unavailable",
		"1 while a part of the shared store (the Redis server, or a cluster master by its slots) is unavailable and the failure policy decides for its keys; 0 when it answers.",
		[]string{"node", "slots"}, nil)}
}

type nodeGauge struct {
	nodes func() []NodeState
	desc  *prometheus.Desc
}

func (g nodeGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g nodeGauge) Collect(ch chan<- prometheus.Metric) {
	for _, n := range g.nodes() {
		v := 0.0
		if n.Unavailable {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, n.Node, n.Slots)
	}
}

// RegisterBudgets registers the counters of leased budgets
// (store/budget) in reg, read from stats at each scrape: nothing when
// the store serves no budget (ok false). A store replaced by a reload
// starts again from zero, which Prometheus reads as a counter reset.
func RegisterBudgets(reg *prometheus.Registry, stats func() (budget.Stats, bool)) {
	counter := func(name, help string, of func(budget.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			st, ok := stats()
			if !ok {
				return 0
			}
			return float64(of(st))
		})
	}
	reg.MustRegister(
		counter("portero_budget_takes_total", "Batches of units taken from the shared store for rules with a budget.",
			func(s budget.Stats) uint64 { return s.Takes }),
		counter("portero_budget_units_taken_total", "Units those batches got.",
			func(s budget.Stats) uint64 { return s.Taken }),
		counter("portero_budget_take_refusals_total", "Takes that got nothing: the shared state had fewer units left than the request needed.",
			func(s budget.Stats) uint64 { return s.Refusals }),
		counter("portero_budget_units_returned_total", "Unspent units of windows given back to the shared store (idle batches, drain).",
			func(s budget.Stats) uint64 { return s.Returned }),
		counter("portero_budget_units_expired_total", "Units that ended unspent and could not be given back (a bucket's batch past its lifetime, a window's at its end).",
			func(s budget.Stats) uint64 { return s.Expired }),
		counter("portero_budget_store_calls_total", "Calls to the shared store for rules with a budget (takes and give-backs); divided by portero_budget_hits_total, the store calls per decision.",
			func(s budget.Stats) uint64 { return s.Calls }),
		counter("portero_budget_hits_total", "Hits of rules with a budget decided from batches.",
			func(s budget.Stats) uint64 { return s.Hits }),
	)
}
