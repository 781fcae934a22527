package server

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portero-rl/portero/internal/admin"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/lifecycle"
	"github.com/portero-rl/portero/internal/tlsreload"
)

// The seam of `portero rls` (rls*.go): the shared pieces it takes from
// packages admin, dashboard and tlsreload, under the names its files use
// until they move to a package of their own and call those directly.

type adminBase struct {
	reg   *prometheus.Registry
	ready *lifecycle.Readiness
	dash  *dashboard.Dashboard
	token func() string
	index http.HandlerFunc
}

func (a adminBase) server(log *slog.Logger, routes func(*http.ServeMux)) *http.Server {
	return admin.Listener{Registry: a.reg, Ready: a.ready, Dashboard: a.dash, Token: a.token, Index: a.index}.Server(log, routes)
}

type refusals struct{ dashboard.Refused }

func (rf *refusals) add(rule, key string, shadow bool, now time.Time) { rf.Add(rule, key, shadow, now) }
func (rf *refusals) top(now time.Time, minutes, n int) []dashboard.Key {
	return rf.Top(now, minutes, n)
}

func dashKeys(keys []dashboard.Key) []dashboard.Key { return keys }

var (
	newRegistry         = admin.NewRegistry
	storeLatencyBuckets = admin.StoreLatencyBuckets
	newReloads          = admin.NewReloads
	newFallbackGauge    = admin.NewFallbackGauge
	registerBudgets     = admin.RegisterBudgets
	readLatency         = admin.ReadLatency
	readCounter         = admin.ReadCounter
	label               = admin.Label
	writeJSON           = admin.WriteJSON
	reloader            = tlsreload.Optional
	withProbes          = admin.Probes
)
