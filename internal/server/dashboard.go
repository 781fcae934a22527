package server

import (
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/portero-rl/portero/internal/dashboard"
)

// dashSource is serve's Source of the dashboard: the running
// configuration, the decision counters of its metrics, the refused keys of
// /api/refused, the usage tracker fed by the decisions, and the store's
// health.
type dashSource struct{ s *Server }

// Snapshot implements dashboard.Source.
func (d dashSource) Snapshot() dashboard.Snapshot {
	s := d.s
	cfg := s.gw.Config()
	now := s.now()
	snap := dashboard.Snapshot{
		Service: "portero serve",
		Config: dashboard.Config{Source: cfg.Source, Loaded: time.Unix(0, s.loadedAt.Load()),
			Reloads: int64(readCounter(s.metrics.reloads.WithLabelValues("ok"))), ReloadErrors: int64(readCounter(s.metrics.reloads.WithLabelValues("error")))},
		TopRefusedWindow: "5 min",
		Usage:            s.obs.usage.Top(now),
		Store: dashboard.Store{Type: cfg.StoreType, OnError: string(cfg.OnError), Connected: !s.storeUnreached(),
			Fallback: s.metrics.fallback.Load(), Errors: readCounter(s.metrics.storeErrors)},
	}
	counts := map[string]map[string]float64{}
	if mfs, err := s.metrics.reg.Gather(); err == nil {
		for _, mf := range mfs {
			switch mf.GetName() {
			case "portero_decisions_total":
				for _, m := range mf.GetMetric() {
					rule, outcome := label(m, "rule"), label(m, "outcome")
					if counts[rule] == nil {
						counts[rule] = map[string]float64{}
					}
					counts[rule][outcome] = m.GetCounter().GetValue()
				}
			case "portero_failure_policy_decisions_total":
				for _, m := range mf.GetMetric() {
					snap.Store.FallbackDecisions += m.GetCounter().GetValue()
				}
			case "portero_store_latency_seconds":
				readLatency(&snap, mf)
			}
		}
	}
	for _, r := range cfg.Policy.Rules() {
		c := counts[r.Name]
		if c == nil {
			c = map[string]float64{}
		}
		snap.Rules = append(snap.Rules, dashboard.Rule{Name: r.Name, Key: r.Key.String(), Algorithm: string(r.Algorithm),
			Limit: r.Limit.String(), Mode: string(r.Mode), Quota: r.Limit.IsCalendar(), Counts: c})
	}
	snap.TopRefused = dashKeys(s.obs.refused.top(now, 5, 20))
	return snap
}

// readLatency fills the store's latency histogram and the request count
// of a snapshot from the portero_store_latency_seconds family (serve's and
// rls's metrics both have it, with one series).
func readLatency(snap *dashboard.Snapshot, mf *dto.MetricFamily) {
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

// dashKeys converts the refused keys of /api/refused to the dashboard's.
func dashKeys(top []RefusedKey) []dashboard.Key {
	var keys []dashboard.Key
	for _, k := range top {
		keys = append(keys, dashboard.Key{Rule: k.Rule, Key: k.Key, Shadow: k.Shadow, Count: k.Count})
	}
	return keys
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// readCounter reads a counter's value.
func readCounter(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// isDashboard reports whether an admin path is the dashboard's.
func isDashboard(path string) bool {
	return path == "/dashboard" || strings.HasPrefix(path, "/dashboard/")
}
