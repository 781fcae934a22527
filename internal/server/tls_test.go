package server_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/buildinfo"
	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/tlstest"
)

// tlsGet asks url with a fresh connection (so that each request has its
// own handshake) trusting ca, presenting cert when not nil, and returns
// the status, the body and the serial number of the server's certificate.
func tlsGet(url string, ca *tlstest.CA, cert *tls.Certificate, hdr ...string) (int, string, string, error) {
	tr := &http.Transport{TLSClientConfig: tlstest.ClientConfig(ca, cert), DisableKeepAlives: true, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.TLS.PeerCertificates[0].SerialNumber.String(), nil
}

// TestServeTLS: server.tls serves the gateway over TLS (HTTP/2 offered),
// and a certificate rotated on disk serves the next connection without a
// restart; admin.tls with client_ca refuses a client without a
// certificate, or with one another CA signed, and admits one its CA signed
// (the token still asked for on top).
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	ca, clients, other := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "client CA"), tlstest.NewCA(t, "other CA")
	first := ca.Server(t)
	gwCert, gwKey := first.Write(t, dir, "gateway")
	adCert, adKey := ca.Server(t).Write(t, dir, "admin")
	clientCA := clients.WriteCA(t, dir, "clients")
	path := filepath.Join(dir, "p.yaml")
	writeFile(t, path, fmt.Sprintf(`server:
  tls: {cert_file: %s, key_file: %s}
admin:
  token: s3cret
  tls: {cert_file: %s, key_file: %s, client_ca: %s}
upstreams: {d: {type: demo}}
routes: [{upstream: d}]
`, gwCert, gwKey, adCert, adKey, clientCA))
	r := start(t, server.Options{ConfigPath: path})
	if !strings.HasPrefix(r.gateway, "https://") || !strings.HasPrefix(r.admin, "https://") {
		t.Fatalf("printed URLs %s and %s, want https", r.gateway, r.admin)
	}
	waitFor(t, "the try line", func() bool { return strings.Contains(r.out.String(), "try: ") })
	if !strings.Contains(r.out.String(), "-w '%{http_code}\\n' "+r.gateway+"/; done\n") {
		t.Errorf("the try line does not name the gateway %s:\n%s", r.gateway, r.out)
	}

	code, _, serial, err := tlsGet(r.gateway+"/healthz", ca, nil)
	if err != nil || code != 200 || serial != first.Serial.String() {
		t.Fatalf("gateway over TLS: %d %v, serial %s want %s", code, err, serial, first.Serial)
	}
	if resp, err := http.Get("http" + strings.TrimPrefix(r.gateway, "https") + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS gateway: %d, want net/http's 400", resp.StatusCode)
		}
	}
	second := ca.Server(t)
	second.Write(t, dir, "gateway")
	code, _, serial, err = tlsGet(r.gateway+"/healthz", ca, nil)
	if err != nil || code != 200 || serial != second.Serial.String() {
		t.Fatalf("after rotating the gateway's certificate: %d %v, serial %s want the new %s", code, err, serial, second.Serial)
	}

	good, stranger := clients.Client(t, "ops"), other.Client(t, "ops")
	gc, sc := good.TLS(t), stranger.TLS(t)
	if _, _, _, err := tlsGet(r.admin+"/metrics", ca, nil, "Authorization", "Bearer s3cret"); err == nil {
		t.Error("admin admitted a client without a certificate")
	}
	if _, _, _, err := tlsGet(r.admin+"/metrics", ca, &sc, "Authorization", "Bearer s3cret"); err == nil {
		t.Error("admin admitted a certificate of another CA")
	}
	if code, _, _, err := tlsGet(r.admin+"/metrics", ca, &gc); err != nil || code != 401 {
		t.Errorf("admin with a good certificate and no token: %d %v, want 401", code, err)
	}
	code, body, _, err := tlsGet(r.admin+"/metrics", ca, &gc, "Authorization", "Bearer s3cret")
	if err != nil || code != 200 || !strings.Contains(body, "portero_build_info") {
		t.Errorf("admin with the CA's certificate and the token: %d %v", code, err)
	}
}

// TestAdminCommonEndpoints: /api/version is portero --version's data;
// portero_build_info carries it; pprof answers on the admin listener behind
// the token and nowhere on the gateway; /healthz and /readyz answer
// without the token.
func TestAdminCommonEndpoints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, path, "admin: {token: s3cret}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n")
	r := start(t, server.Options{ConfigPath: path})
	auth := []string{"Authorization", "Bearer s3cret"}
	checkAdminCommon(t, r.admin, r.gateway, auth)
}

// checkAdminCommon checks what every admin listener serves (serve's and
// rls's): admin is its URL, traffic the URL of a listener that serves
// traffic, auth the header that authenticates.
func checkAdminCommon(t *testing.T, admin, traffic string, auth []string) {
	t.Helper()
	want := buildinfo.Read()
	code, _, body := get(t, admin+"/api/version", auth...)
	var got buildinfo.Info
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil || got.Version != want.Version || got.GoVersion != want.GoVersion ||
		got.Revision != want.Revision || got.GoVersion == "" {
		t.Errorf("/api/version = %d %s (%v), want %+v", code, body, err, want)
	}
	_, _, metrics := get(t, admin+"/metrics", auth...)
	line := fmt.Sprintf(`portero_build_info{goversion=%q,revision=%q,version=%q} 1`, want.GoVersion, want.Revision, want.Version)
	if !strings.Contains(metrics, line) {
		t.Errorf("/metrics lacks %s", line)
	}
	// What only pprof's pages say (the demo upstream answers any path).
	for p, mark := range map[string]string{"/debug/pprof/": "Types of profiles available", "/debug/pprof/goroutine?debug=1": "goroutine profile: total",
		"/debug/pprof/symbol": "num_symbols", "/debug/pprof/heap?debug=1": "heap profile:"} {
		if code, _, body := get(t, admin+p); code != 401 || strings.Contains(body, mark) {
			t.Errorf("%s without the token = %d, want 401", p, code)
		}
		if code, _, body := get(t, admin+p, auth...); code != 200 || !strings.Contains(body, mark) {
			t.Errorf("%s with the token = %d, body without %q", p, code, mark)
		}
		if _, _, body := get(t, traffic+p, auth...); strings.Contains(body, mark) {
			t.Errorf("%s answered pprof's page on the traffic listener %s", p, traffic)
		}
	}
	if code, _, body := get(t, admin+"/debug/pprof/profile?seconds=1", auth...); code != 200 || len(body) == 0 {
		t.Errorf("CPU profile = %d, %d bytes", code, len(body))
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _, _ := get(t, admin+p); code != 200 {
			t.Errorf("%s without the token = %d, want 200", p, code)
		}
	}
}
