// Package admin is the admin listener of `portero serve` and `portero
// rls`: the bearer token, /metrics, /healthz and /readyz, Go's profiler,
// /api/version and the dashboard's mount, and the series every Portero
// server exports.
//
// A command adds its own endpoints (routes) to the same mux. The probes
// answer without the token, saying only "ok" or why not, so that a kubelet
// needs no secret; client certificates, when the listener's TLS has a
// client CA, are asked for in the handshake, before any of this.
package admin

import (
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/portero-rl/portero/internal/buildinfo"
	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/lifecycle"
)

// Listener is what every admin listener serves beside a command's own
// endpoints.
type Listener struct {
	// Registry is served at /metrics.
	Registry *prometheus.Registry
	// Ready answers /readyz.
	Ready *lifecycle.Readiness
	// Dashboard, when not nil, serves /dashboard/ and checks the token
	// itself (as a bearer token, or the cookie its login form sets for a
	// browser); / leads to it.
	Dashboard *dashboard.Dashboard
	// Token is read at every request (a reload may change it); nil or ""
	// means none.
	Token func() string
	// Index, when set, answers / and every path no route takes, in place
	// of the redirect to the dashboard (envoyproxy/ratelimit's debug port).
	Index http.HandlerFunc
}

// Handler returns the admin handler: the common endpoints and those
// routes adds to the same mux.
func (a Listener) Handler(routes func(*http.ServeMux)) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, http.StatusOK, buildinfo.Read()) })
	// On this mux only, never on a listener that serves traffic (pprof's
	// init registers them on http.DefaultServeMux, which Portero never
	// serves).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if routes != nil {
		routes(mux)
	}
	if a.Index != nil {
		mux.HandleFunc("/", a.Index)
	}
	return Probes(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.Dashboard != nil && (r.URL.Path == "/dashboard" || strings.HasPrefix(r.URL.Path, "/dashboard/")) {
			a.Dashboard.ServeHTTP(w, r)
			return
		}
		if a.Dashboard != nil && r.URL.Path == "/" && a.Index == nil {
			http.Redirect(w, r, "/dashboard/", http.StatusFound) // which asks for the token itself
			return
		}
		var token string
		if a.Token != nil {
			token = a.Token()
		}
		if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); token != "" &&
			(!ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="portero-admin"`)
			WriteJSON(w, http.StatusUnauthorized, map[string]string{"error": "a valid bearer token is required"})
			return
		}
		mux.ServeHTTP(w, r)
	}), a.Ready)
}

// Server returns the admin listener's HTTP server. It has no write
// timeout: /debug/pprof/profile and trace stream for as many seconds as
// asked.
func (a Listener) Server(log *slog.Logger, routes func(*http.ServeMux)) *http.Server {
	return &http.Server{Handler: a.Handler(routes), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
}

// Probes serves /readyz from ready and /healthz in front of h: the
// answers of a load balancer's and a kubelet's probes, without a token.
func Probes(h http.Handler, ready *lifecycle.Readiness) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			ready.ServeHTTP(w, r)
		case "/healthz":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("ok\n"))
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// WriteJSON answers v as indented JSON, never cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
