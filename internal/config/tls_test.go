package config_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/tlstest"
)

// TestTLSErrors: server.tls and admin.tls are checked when the file loads,
// every error at the field it is about, with file, line and column: a
// missing half of the pair, a file that is not there, a key of another
// certificate, a client CA with no certificate in it, an unknown field.
func TestTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	cert, key := ca.Server(t).Write(t, dir, "a")
	_, otherKey := ca.Server(t).Write(t, dir, "b")
	caFile := ca.WriteCA(t, dir, "ca")
	missing := filepath.Join(dir, "missing.crt")
	tail := "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n"
	for _, tt := range []struct {
		name, src string
		want      []string // error lines
	}{
		{"good", fmt.Sprintf("server:\n  tls: {cert_file: %s, key_file: %s}\nadmin:\n  tls: {cert_file: %s, key_file: %s, client_ca: %s}\n", cert, key, cert, key, caFile), nil},
		{"no key", fmt.Sprintf("server:\n  tls:\n    cert_file: %s\n", cert),
			[]string{"t.yaml:3:5: server.tls.key_file: required with TLS: the certificate's private key, PEM"}},
		{"no certificate", fmt.Sprintf("admin:\n  tls:\n    key_file: %s\n    client_ca: %s\n", key, caFile),
			[]string{"t.yaml:3:5: admin.tls.cert_file: required with TLS: the certificate chain, PEM"}},
		{"missing file", fmt.Sprintf("server:\n  tls:\n    cert_file: %s\n    key_file: %s\n", missing, key),
			[]string{fmt.Sprintf("t.yaml:3:16: server.tls.cert_file: %s: no such file or directory", missing)}},
		{"key of another certificate", fmt.Sprintf("server:\n  tls:\n    cert_file: %s\n    key_file: %s\n", cert, otherKey),
			[]string{"t.yaml:4:15: server.tls.key_file: " + otherKey + ": with certificate " + cert + ": tls: private key does not match public key"}},
		{"CA without certificates", fmt.Sprintf("admin:\n  tls:\n    cert_file: %s\n    key_file: %s\n    client_ca: %s\n", cert, key, key),
			[]string{fmt.Sprintf("t.yaml:5:16: admin.tls.client_ca: %s: no PEM certificate in it", key)}},
		{"unknown field", "admin:\n  tls: {certfile: x}\n",
			[]string{"t.yaml:2:9: admin.tls.certfile: unknown field; did you mean cert_file?"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse("t.yaml", []byte(tt.src+tail))
			if tt.want == nil {
				if err != nil || c.ServerTLS.CertFile != cert || c.AdminTLS.ClientCAFile != caFile {
					t.Fatalf("Parse = %+v, %v", c, err)
				}
				return
			}
			var es config.Errors
			if !errors.As(err, &es) {
				t.Fatalf("Parse = %v, want Errors", err)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestTLSFilesAtValidation: `config validate` (AllowUnsetEnv) lists TLS
// files that are not there as needs, as it lists unset environment
// variables, but still checks those that are.
func TestTLSFilesAtValidation(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	cert, _ := ca.Server(t).Write(t, dir, "a")
	missing := filepath.Join(dir, "tls.key")
	src := fmt.Sprintf("server:\n  tls: {cert_file: %s, key_file: %s}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n", cert, missing)
	if _, err := config.Parse("v.yaml", []byte(src)); err == nil {
		t.Fatal("Parse with a missing key: no error")
	}
	c, err := config.ParseWith("v.yaml", []byte(src), config.Options{AllowUnsetEnv: true})
	if err != nil {
		t.Fatalf("ParseWith(AllowUnsetEnv): %v", err)
	}
	col := len("server:\n  tls: {cert_file: "+cert+", key_file: ") - len("server:\n") + 1
	want := fmt.Sprintf("v.yaml:2:%d: server.tls.key_file: needs file %s (missing here)", col, missing)
	if len(c.Files) != 1 || c.Files[0].String() != want {
		t.Errorf("Files = %v, want [%s]", c.Files, want)
	}
	bad := fmt.Sprintf("server:\n  tls: {cert_file: %s, key_file: %s}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n", cert, cert)
	if _, err := config.ParseWith("v.yaml", []byte(bad), config.Options{AllowUnsetEnv: true}); err == nil || !strings.Contains(err.Error(), "server.tls.key_file") {
		t.Errorf("a key file that exists but is no key: %v, want an error at server.tls.key_file", err)
	}
}
