package server

import (
	"fmt"
	"github.com/portero-rl/portero/internal/admin"
	"sort"
	"strings"

	"github.com/portero-rl/portero/descriptor"
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
	storeType := r.opts.Store
	if storeType == "" {
		storeType = "memory"
	}
	onError := r.engine.OnError().String()
	snap := dashboard.Snapshot{
		Service:          "portero rls",
		TopRefusedWindow: "5 min",
		Config: dashboard.Config{Source: r.opts.ConfigPath,
			Reloads: int64(admin.ReadCounter(m.reloads.WithLabelValues("ok"))), ReloadErrors: int64(admin.ReadCounter(m.reloads.WithLabelValues("error")))},
		Store: dashboard.Store{Type: storeType, OnError: onError, Connected: r.connected() == 1, Fallback: m.fallback.Load(),
			Errors: admin.ReadCounter(m.storeErrors)},
	}
	if src := r.source.Load(); src != nil {
		snap.Config.Loaded = src.at
	}
	type ruleKey struct{ domain, key string }
	counts := map[ruleKey]map[string]float64{}
	if mfs, err := m.reg.Gather(); err == nil {
		for _, mf := range mfs {
			switch mf.GetName() {
			case "portero_rls_decisions_total":
				for _, x := range mf.GetMetric() {
					k := ruleKey{admin.Label(x, "domain"), admin.Label(x, "key")}
					if counts[k] == nil {
						counts[k] = map[string]float64{}
					}
					counts[k][admin.Label(x, "outcome")] = x.GetCounter().GetValue()
				}
			case "portero_rls_failure_policy_decisions_total":
				for _, x := range mf.GetMetric() {
					snap.Store.FallbackDecisions += x.GetCounter().GetValue()
				}
			case "portero_store_latency_seconds":
				admin.ReadLatency(&snap, mf)
			}
		}
	}
	if src := r.source.Load(); src != nil {
		src.limits.Walk(func(dom *descriptor.Domain, n *descriptor.Node) {
			l := n.Limit
			if l == nil {
				return
			}
			k := ruleKey{dom.Name, strings.TrimPrefix(l.FullKey, dom.Name+".")}
			snap.Rules = append(snap.Rules, dashRule(k.domain, k.key, l, counts[k]))
			delete(counts, k)
		})
	}
	// Series of no configured limit: overrides, detailed_metric values, a
	// limit a reload removed.
	keys := make([]ruleKey, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].domain != keys[j].domain {
			return keys[i].domain < keys[j].domain
		}
		return keys[i].key < keys[j].key
	})
	for _, k := range keys {
		snap.Rules = append(snap.Rules, dashRule(k.domain, k.key, nil, counts[k]))
	}
	now := m.now()
	snap.Usage = m.usage.Top(now)
	snap.TopRefused = m.refused.Top(now, 5, 20)
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
