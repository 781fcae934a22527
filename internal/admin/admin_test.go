package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/lifecycle"
)

type emptySource struct{}

func (emptySource) Snapshot() dashboard.Snapshot { return dashboard.Snapshot{} }

// TestListener: behind the token, the common endpoints and a command's
// own route answer only with it; the probes answer without it; / leads to
// the dashboard, which asks for the token itself.
func TestListener(t *testing.T) {
	ready := &lifecycle.Readiness{}
	ready.Serving()
	token := func() string { return "s3cret" }
	l := Listener{Registry: NewRegistry(), Ready: ready, Token: token, Dashboard: dashboard.New(emptySource{}, dashboard.Options{Token: token})}
	srv := httptest.NewServer(l.Handler(func(mux *http.ServeMux) {
		mux.HandleFunc("GET /own", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "own") })
	}))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, auth bool) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer s3cret")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	for path, want := range map[string]string{"/metrics": "portero_build_info{", "/api/version": `"version":`, "/own": "own",
		"/debug/pprof/": "Types of profiles available"} {
		if code, h, _ := get(path, false); code != 401 || !strings.Contains(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s without the token = %d, want 401 with a Bearer challenge", path, code)
		}
		if code, _, body := get(path, true); code != 200 || !strings.Contains(body, want) {
			t.Errorf("%s with the token = %d %.80q, want 200 with %q", path, code, body, want)
		}
	}
	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
		if code, _, body := get(path, false); code != 200 || body != want {
			t.Errorf("%s without the token = %d %q, want 200 %q", path, code, body, want)
		}
	}
	if code, h, _ := get("/", false); code != http.StatusFound || h.Get("Location") != "/dashboard/" {
		t.Errorf("/ = %d to %q, want a redirect to /dashboard/", code, h.Get("Location"))
	}
	if code, _, body := get("/dashboard/", false); code != 401 || !strings.Contains(body, "<form") {
		t.Errorf("/dashboard/ without the token = %d, want its login form", code)
	}
}
