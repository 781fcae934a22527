package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/buildinfo"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/httpanswer"
	"github.com/portero-rl/portero/internal/lifecycle"
)

// Resetter is implemented by stores that can forget a key's state.
type Resetter interface {
	Reset(ctx context.Context, rule portero.Rule, key string) error
}

// adminBase is what every admin listener serves, `portero serve`'s and
// `portero rls`'s alike, beside the command's own endpoints: /metrics,
// /healthz and /readyz, /api/version and net/http/pprof under
// /debug/pprof/, behind the bearer token when one is set (except the two
// probes, which say only "ok" or why not, so that a kubelet needs no
// secret). Client certificates, when admin TLS has a client CA, are asked
// for in the handshake, before any of this.
type adminBase struct {
	reg   *prometheus.Registry
	ready *lifecycle.Readiness
	// dash, when not nil, is the dashboard: it serves /dashboard/ and
	// checks the token itself (as a bearer token, or the cookie its login
	// form sets for a browser), and / leads to it.
	dash *dashboard.Dashboard
	// token is read at every request: a reload may change it. Nil or ""
	// means none.
	token func() string
	// index, when set, answers / and every path no route takes, in place
	// of the redirect to the dashboard (envoyproxy/ratelimit's debug port).
	index http.HandlerFunc
}

// handler returns the admin handler: the common endpoints, and those
// routes adds (the command's own, on the same mux).
func (a adminBase) handler(routes func(*http.ServeMux)) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, buildinfo.Read()) })
	// net/http/pprof's handlers, on this mux only: never on a listener
	// that serves traffic (its init registers them on http.DefaultServeMux,
	// which Portero never serves).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if routes != nil {
		routes(mux)
	}
	if a.index != nil {
		mux.HandleFunc("/", a.index)
	}
	probes := http.NewServeMux()
	probes.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	probes.Handle("GET /readyz", a.ready)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			probes.ServeHTTP(w, r)
			return
		}
		if a.dash != nil && isDashboard(r.URL.Path) {
			a.dash.ServeHTTP(w, r)
			return
		}
		if a.dash != nil && r.URL.Path == "/" && a.index == nil {
			http.Redirect(w, r, "/dashboard/", http.StatusFound) // which asks for the token itself
			return
		}
		var token string
		if a.token != nil {
			token = a.token()
		}
		if token == "" {
			mux.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="portero-admin"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a valid bearer token is required"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// server returns the admin listener's HTTP server. It has no write
// timeout: /debug/pprof/profile and trace stream for as many seconds as
// asked.
func (a adminBase) server(log *slog.Logger, routes func(*http.ServeMux)) *http.Server {
	return &http.Server{Handler: a.handler(routes), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
}

// base is serve's admin base.
func (s *Server) base() adminBase {
	return adminBase{reg: s.metrics.reg, ready: s.ready, token: s.adminToken, dash: s.dash}
}

// adminRoutes adds serve's own endpoints: /config, /api/refused,
// /api/keys and the live view at /.
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
			if err != nil || n < 1 || n > refusalMinutes {
				writeProblem(w, http.StatusBadRequest, fmt.Sprintf("minutes=%q: want a whole number of minutes from 1 to %d", q, refusalMinutes))
				return
			}
			minutes = n
		}
		writeJSON(w, http.StatusOK, s.obs.refused.top(s.now(), minutes, 50))
	})
	mux.HandleFunc("/api/keys", s.keys)
}

// writeProblem answers an RFC 9457 problem body.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	httpanswer.Error(w, status, detail)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
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
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want ?rule=NAME&key=KEY (keys as shown by /api/refused)"})
		return
	}
	rule := s.gw.Config().Policy.Rule(name)
	if rule == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no rule " + strconv.Quote(name)})
		return
	}
	if rule.IsConcurrency() {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "rule " + strconv.Quote(name) + " is a concurrency limit: its state is the requests in flight, which end by themselves"})
		return
	}
	switch r.Method {
	case http.MethodGet:
		var v engine.Verdict
		if err := s.gw.Limiter().Engine().Peek(r.Context(), s.now(), []engine.Hit{{Rule: rule.Engine(), Key: key, Cost: 1}}, &v); err != nil {
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
			return
		}
		res := &v.Results[0]
		d := res.Decision
		out := map[string]any{"rule": name, "key": key, "allowed": d.Allowed, "limit": d.Limit,
			"remaining": d.Remaining, "retry_after_seconds": d.RetryAfter.Seconds(), "reset_after_seconds": d.ResetAfter.Seconds()}
		if res.Failure != "" {
			out["decided_by"] = res.Failure
		}
		writeJSON(w, http.StatusOK, out)
	case http.MethodDelete:
		rs, ok := s.currentStore().(Resetter)
		if !ok {
			writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "this store cannot reset a key"})
			return
		}
		if err := rs.Reset(r.Context(), rule.StoreRule(), key); err != nil {
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
			return
		}
		s.log.Info("key reset through the admin API", "rule", name, "key", key)
		writeJSON(w, http.StatusOK, map[string]string{"reset": key, "rule": name})
	default:
		w.Header().Set("Allow", "GET, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "GET or DELETE"})
	}
}
