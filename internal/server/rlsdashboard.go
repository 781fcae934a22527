package server

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/admin"
	"github.com/portero-rl/portero/internal/dashboard"
)

// rlsDashSource is rls's Source of the dashboard: its rules are the
// limits of the configuration (named by domain and envoyproxy/ratelimit's
// stat key, as its metrics name them), with their decision counters, and
// the keys its metrics saw beyond them (limit overrides, detailed_metric
// values); the keys closest to their limits and the refused keys come from
// its observer; the store's health and the configuration's source as for
// serve.
type rlsDashSource struct{ r *rlsServer }

// Snapshot implements dashboard.Source.
func (d rlsDashSource) Snapshot() dashboard.Snapshot {
	r := d.r
	m := r.metrics
	snap, counts := admin.DashMetrics{Registry: m.reg, Reloads: m.reloads, StoreErrors: m.storeErrors, Fallback: &m.fallback,
		Refused: &m.refused, Usage: m.usage, Decisions: "portero_rls_decisions_total",
		FailurePolicy: "portero_rls_failure_policy_decisions_total", Labels: []string{"domain", "key"}}.Snapshot(m.now())
	snap.Service, snap.Config.Source = "portero rls", r.opts.ConfigPath
	snap.Store.Type, snap.Store.OnError, snap.Store.Connected = cmp.Or(r.opts.Store, "memory"), r.engine.OnError().String(), r.connected() == 1
	if src := r.source.Load(); src != nil {
		snap.Config.Loaded = src.at
		src.limits.Walk(func(dom *descriptor.Domain, n *descriptor.Node) {
			if l := n.Limit; l != nil {
				key := strings.TrimPrefix(l.FullKey, dom.Name+".")
				snap.Rules = append(snap.Rules, dashRule(dom.Name, key, l, counts[dom.Name+"\x00"+key]))
				delete(counts, dom.Name+"\x00"+key)
			}
		})
	}
	// Series of no configured limit: overrides, detailed_metric values, a
	// limit a reload removed; by domain, then key ("\x00" sorts first).
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		domain, key, _ := strings.Cut(k, "\x00")
		snap.Rules = append(snap.Rules, dashRule(domain, key, nil, counts[k]))
	}
	return snap
}

// dashRule is the dashboard's rule of limit l (nil for a series of no
// configured limit) with its counters.
func dashRule(domain, key string, l *descriptor.Limit, counts map[string]float64) dashboard.Rule {
	if counts == nil {
		counts = map[string]float64{}
	}
	r := dashboard.Rule{Name: domain + " " + key, Key: key, Mode: "enforce", Limit: "(override, or a detailed_metric value)", Counts: counts}
	switch {
	case l == nil:
	case l.Unlimited:
		r.Limit = "unlimited"
	default:
		r.Limit, r.Algorithm = limitText(l), string(l.Rule.Algorithm)
		r.Quota = l.Rule.Limit.IsCalendar()
		if l.Rule.Shadow {
			r.Mode = "shadow"
		}
	}
	return r
}

// limitText writes a limit as its file does: requests_per_unit/unit
// ("10/second"), with Portero's extension's burst, or the look-back
// window of a look-back limit.
func limitText(l *descriptor.Limit) string {
	lim := l.Rule.Limit
	if l.Unit == descriptor.UnitUnknown {
		return lim.String()
	}
	s := fmt.Sprintf("%d/%s", l.RequestsPerUnit, l.Unit)
	if lim.Burst > 0 && lim.Burst != lim.Count {
		s += fmt.Sprintf(" burst %d", lim.Burst)
	}
	return s
}
