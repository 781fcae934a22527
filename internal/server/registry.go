package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/portero-rl/portero/internal/buildinfo"
)

// newRegistry returns a registry holding what every Portero server
// exports, `serve` and `rls` alike: portero_build_info (the data of
// `portero --version` and /api/version), and the Go runtime's and the
// process's collectors.
func newRegistry() *prometheus.Registry {
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
