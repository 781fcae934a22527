package servemetrics

import (
	"time"

	"github.com/portero-rl/portero/internal/admin"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/policy"
)

// Snapshot is what the metrics know of the dashboard's snapshot at now
// for the rules of p: their decision counters, the reloads, the keys
// refused most (over 5 minutes) and closest to their limits, the store's
// errors, fallback and latency. The command adds what it alone knows (its
// name, the configuration's source, the store's type).
func (m *Observer) Snapshot(p *policy.Policy, now time.Time) dashboard.Snapshot {
	snap := dashboard.Snapshot{
		Config: dashboard.Config{Reloads: int64(admin.ReadCounter(m.reloads.WithLabelValues("ok"))),
			ReloadErrors: int64(admin.ReadCounter(m.reloads.WithLabelValues("error")))},
		TopRefused:       m.refused.Top(now, 5, 20),
		TopRefusedWindow: "5 min",
		Usage:            m.usage.Top(now),
		Store:            dashboard.Store{Fallback: m.fallback.Load(), Errors: admin.ReadCounter(m.storeErrors)},
	}
	counts := map[string]map[string]float64{}
	if mfs, err := m.reg.Gather(); err == nil {
		for _, mf := range mfs {
			switch mf.GetName() {
			case "portero_decisions_total":
				for _, s := range mf.GetMetric() {
					rule := admin.Label(s, "rule")
					if counts[rule] == nil {
						counts[rule] = map[string]float64{}
					}
					counts[rule][admin.Label(s, "outcome")] = s.GetCounter().GetValue()
				}
			case "portero_failure_policy_decisions_total":
				for _, s := range mf.GetMetric() {
					snap.Store.FallbackDecisions += s.GetCounter().GetValue()
				}
			case "portero_store_latency_seconds":
				admin.ReadLatency(&snap, mf)
			}
		}
	}
	for _, r := range p.Rules() {
		c := counts[r.Name]
		if c == nil {
			c = map[string]float64{}
		}
		snap.Rules = append(snap.Rules, dashboard.Rule{Name: r.Name, Key: r.Key.String(), Algorithm: string(r.Algorithm),
			Limit: r.Limit.String(), Mode: string(r.Mode), Quota: r.Limit.IsCalendar(), Counts: c})
	}
	return snap
}
