package admin

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/portero-rl/portero/internal/buildinfo"
	"github.com/portero-rl/portero/internal/dashboard"
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

// ReadLatency fills a dashboard snapshot's store latency and request
// count from the portero_store_latency_seconds family (one series).
func ReadLatency(snap *dashboard.Snapshot, mf *dto.MetricFamily) {
	ms := mf.GetMetric()
	if len(ms) != 1 {
		return
	}
	h := ms[0].GetHistogram()
	snap.Store.Latency.Count, snap.Store.Latency.Sum = h.GetSampleCount(), h.GetSampleSum()
	for _, b := range h.GetBucket() {
		snap.Store.Latency.Bounds = append(snap.Store.Latency.Bounds, b.GetUpperBound())
		snap.Store.Latency.Counts = append(snap.Store.Latency.Counts, b.GetCumulativeCount())
	}
	snap.Requests = float64(h.GetSampleCount())
}

// ReadCounter returns a counter's value.
func ReadCounter(c prometheus.Counter) float64 {
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
