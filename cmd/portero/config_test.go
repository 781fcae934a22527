package main

import (
	"os"
	"strings"
	"testing"
)

// TestConfigValidateUnsetEnv: config validate does not fail because an
// environment variable the file reads is unset where it runs (CI): it
// reports the need, with the place, and exits 0.
func TestConfigValidateUnsetEnv(t *testing.T) {
	os.Unsetenv("PORTERO_TEST_VALIDATE_TOKEN")
	f := writeFile(t, "env.yaml", "admin: {listen: '0.0.0.0:9090', token_env: PORTERO_TEST_VALIDATE_TOKEN}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n")
	out, errs, code := runCmd(t, "config", "validate", f)
	if code != 0 || !strings.Contains(out, "env.yaml:1:44: admin.token_env: needs environment variable PORTERO_TEST_VALIDATE_TOKEN (unset here)") {
		t.Errorf("validate with the variable unset: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// serve still refuses to start without the token.
	if _, errs, code := runCmd(t, "serve", "--config", f, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"); code == 0 || !strings.Contains(errs, "PORTERO_TEST_VALIDATE_TOKEN is empty or unset") {
		t.Errorf("serve with the variable unset: exit %d\n%s", code, errs)
	}
}
