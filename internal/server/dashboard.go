package server

import (
	"time"

	"github.com/portero-rl/portero/internal/dashboard"
)

// dashSource is serve's Source of the dashboard: what its metrics know,
// and the running configuration and store.
type dashSource struct{ s *Server }

// Snapshot implements dashboard.Source.
func (d dashSource) Snapshot() dashboard.Snapshot {
	s := d.s
	cfg := s.gw.Config()
	snap := s.obs.Snapshot(cfg.Policy, s.now())
	snap.Service = "portero serve"
	snap.Config.Source, snap.Config.Loaded = cfg.Source, time.Unix(0, s.loadedAt.Load())
	snap.Store.Type, snap.Store.OnError, snap.Store.Connected = cfg.StoreType, string(cfg.OnError), !s.storeUnreached()
	return snap
}
