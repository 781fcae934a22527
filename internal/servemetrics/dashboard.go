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
	snap, counts := admin.DashMetrics{Registry: m.reg, Reloads: m.reloads, StoreErrors: m.storeErrors, Fallback: &m.fallback,
		Refused: &m.refused, Usage: m.usage, Decisions: "portero_decisions_total",
		FailurePolicy: "portero_failure_policy_decisions_total", Labels: []string{"rule"}}.Snapshot(now)
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
