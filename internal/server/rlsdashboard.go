package server

import (
	"sort"
	"time"

	"github.com/portero-rl/portero/internal/dashboard"
)

// rlsDashSource is rls's Source of the dashboard: its rules are the
// descriptor keys of its metrics (domain and envoyproxy/ratelimit's stat
// key), with their decision counters; the refused keys come from its
// observer; the store's health and the configuration's source as for
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
	onError := string(r.opts.OnStoreError)
	if onError == "" {
		onError = "allow"
	}
	snap := dashboard.Snapshot{
		Service:          "portero rls",
		TopRefusedWindow: "5 min",
		Config: dashboard.Config{Source: r.opts.ConfigPath,
			Reloads: int64(readCounter(m.reloads.WithLabelValues("ok"))), ReloadErrors: int64(readCounter(m.reloads.WithLabelValues("error")))},
		Store: dashboard.Store{Type: storeType, OnError: onError, Connected: r.connected() == 1, Fallback: m.fallback.Load(),
			Errors: readCounter(m.storeErrors)},
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
					k := ruleKey{label(x, "domain"), label(x, "key")}
					if counts[k] == nil {
						counts[k] = map[string]float64{}
					}
					counts[k][label(x, "outcome")] = x.GetCounter().GetValue()
				}
			case "portero_rls_failure_policy_decisions_total":
				for _, x := range mf.GetMetric() {
					snap.Store.FallbackDecisions += x.GetCounter().GetValue()
				}
			case "portero_store_latency_seconds":
				readLatency(&snap, mf)
			}
		}
	}
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
		mode := "enforce"
		if counts[k]["shadow-refused"] > 0 && counts[k]["refused"] == 0 {
			mode = "shadow"
		}
		snap.Rules = append(snap.Rules, dashboard.Rule{Name: k.domain + " " + k.key, Key: k.key, Limit: "domain " + k.domain,
			Mode: mode, Counts: counts[k]})
	}
	snap.TopRefused = dashKeys(m.refused.top(time.Now(), 5, 20))
	return snap
}
