package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/admin"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/httpanswer"
)

// resetter is implemented by stores that can forget a key's state.
type resetter interface {
	Reset(ctx context.Context, rule portero.Rule, key string) error
}

// adminRoutes adds serve's own endpoints to its admin listener: /config,
// /api/refused and /api/keys.
func (s *Server) adminRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, r *http.Request) {
		cfg := s.gw.Config()
		f := cfg.File.Redacted()
		// The addresses in effect, which --listen and --admin-listen may
		// override and port 0 leaves to the system, not the file's.
		if a := s.addrs.Load(); a != nil {
			f.Server.Listen = a[0]
			f.Admin.Listen = a[1]
			if a[1] == "" {
				f.Admin.Listen = "off"
			}
		}
		out, err := config.Marshal(&f)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
		w.Header().Set("X-Portero-Config-Source", cfg.Source)
		_, _ = w.Write([]byte("# effective configuration, from " + cfg.Source + "\n"))
		_, _ = w.Write(out)
	})
	mux.HandleFunc("GET /api/refused", func(w http.ResponseWriter, r *http.Request) {
		minutes := 5
		if q := r.URL.Query().Get("minutes"); q != "" {
			n, err := strconv.Atoi(q)
			if err != nil || n < 1 || n > dashboard.RefusedMinutes {
				httpanswer.Error(w, http.StatusBadRequest, fmt.Sprintf("minutes=%q: want a whole number of minutes from 1 to %d", q, dashboard.RefusedMinutes))
				return
			}
			minutes = n
		}
		admin.WriteJSON(w, http.StatusOK, s.obs.Refused().Top(s.now(), minutes, 50))
	})
	mux.HandleFunc("/api/keys", s.keys)
}

// keys: GET /api/keys?rule=R&key=K shows a key's state, DELETE resets it,
// when the store supports it (501 otherwise). The state is the engine's
// look at a request of cost 1 from the key now, counting nothing and under
// the failure policy when the store fails (decided_by names it then):
// whether it would pass, what it would leave (remaining), how long until
// such a request passes (retry_after_seconds, 0 when it would) and until
// the key is full again (reset_after_seconds).
func (s *Server) keys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, key := q.Get("rule"), q.Get("key")
	if name == "" || key == "" {
		admin.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "want ?rule=NAME&key=KEY (keys as shown by /api/refused)"})
		return
	}
	rule := s.gw.Config().Policy.Rule(name)
	if rule == nil {
		admin.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "no rule " + strconv.Quote(name)})
		return
	}
	if rule.IsConcurrency() {
		admin.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "rule " + strconv.Quote(name) + " is a concurrency limit: its state is the requests in flight, which end by themselves"})
		return
	}
	switch r.Method {
	case http.MethodGet:
		var v engine.Verdict
		if err := s.gw.Limiter().Engine().Peek(r.Context(), s.now(), []engine.Hit{{Rule: rule.Engine(), Key: key, Cost: 1}}, &v); err != nil {
			admin.WriteJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
			return
		}
		res := &v.Results[0]
		d := res.Decision
		out := map[string]any{"rule": name, "key": key, "allowed": d.Allowed, "limit": d.Limit,
			"remaining": d.Remaining, "retry_after_seconds": d.RetryAfter.Seconds(), "reset_after_seconds": d.ResetAfter.Seconds()}
		if res.Failure != "" {
			out["decided_by"] = res.Failure
		}
		admin.WriteJSON(w, http.StatusOK, out)
	case http.MethodDelete:
		rs, ok := s.currentStore().(resetter)
		if !ok {
			admin.WriteJSON(w, http.StatusNotImplemented, map[string]string{"error": "this store cannot reset a key"})
			return
		}
		if err := rs.Reset(r.Context(), rule.StoreRule(), key); err != nil {
			admin.WriteJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
			return
		}
		s.log.Info("key reset through the admin API", "rule", name, "key", key)
		admin.WriteJSON(w, http.StatusOK, map[string]string{"reset": key, "rule": name})
	default:
		w.Header().Set("Allow", "GET, DELETE")
		admin.WriteJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "GET or DELETE"})
	}
}
