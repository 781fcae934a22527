package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/testenv"
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

// TestConfigValidateAgainst: with --against, validate says what each file
// does to the running configuration's rules, so that a file cut short by
// a writer (here the second half of the rules missing) shows as rules
// removed; warnings come with their place, and do not fail the file.
func TestConfigValidateAgainst(t *testing.T) {
	head := "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules:\n  - {name: a, key: ip, limit: 10/s}\n"
	running := writeFile(t, "running.yaml", head+"  - {name: b, key: ip, limit: 10/s}\n  - {name: c, key: ip, limit: 10/s}\n")
	cut := writeFile(t, "cut.yaml", head)
	edited := writeFile(t, "edited.yaml", strings.Replace(head, "10/s", "20/s", 1)+
		"  - {name: c, key: ip, limit: 10/s}\n  - {name: q, key: ip, algorithm: leaky-queue, limit: 10/s, shape: {delay: 10}}\n")
	out, errs, code := runCmd(t, "config", "validate", "--against", running, cut, edited)
	for _, want := range []string{
		cut + ": ok (1 rule, 1 route, memory store)\n" + cut + ": against " + running + ": 0 added, 2 removed (b, c), 0 changed\n",
		edited + ": against " + running + ": 1 added (q), 1 removed (b), 1 changed (a)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if want := edited + ":6:76: warning: rules[2].shape.delay: 10: the queue has 10 places"; code != 0 || !strings.Contains(errs, want) {
		t.Errorf("exit %d, stderr lacks %q:\n%s", code, want, errs)
	}
	bad := writeFile(t, "bad.yaml", head+"  - {name: b, key: ip, limit: 10/s, cost: 1.5}\n")
	if _, errs, code := runCmd(t, "config", "validate", "--against", bad, cut); code != 2 || !strings.Contains(errs, "--against "+bad+" is invalid") {
		t.Errorf("--against a bad file: exit %d\n%s", code, errs)
	}
}

// TestWatchSettleFlag: --watch-settle is the watcher's settle period, for
// serve and rls alike: the watcher says the one it runs with, and a period
// of zero or less is a usage error.
func TestWatchSettleFlag(t *testing.T) {
	cfg := writeFile(t, "portero.yaml", "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n")
	for _, args := range [][]string{
		{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "off", "--drain-period", "0", "--watch-settle", "750ms"},
		{"rls", "--config", "../../examples/envoy/config", "--watch", "--grpc-listen", "off", "--http-listen", "127.0.0.1:0", "--admin-listen", "off", "--watch-settle", "750ms"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		out, errb := &testenv.Buffer{}, &testenv.Buffer{}
		done := make(chan error, 1)
		go func() { done <- run(ctx, args, out, errb) }()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "listening on") && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		}
		cancel()
		<-done
		if !strings.Contains(errb.String(), "watching the configuration") || !strings.Contains(errb.String(), "settle=750ms") {
			t.Errorf("%s: the watcher's line does not say settle=750ms:\n%s", args[0], errb)
		}
		bad := append(args[:len(args)-1:len(args)-1], "0s")
		if _, errs, code := runCmd(t, bad...); code != 2 || !strings.Contains(errs, "--watch-settle 0s: want more than zero") {
			t.Errorf("%s --watch-settle 0s: exit %d\n%s", args[0], code, errs)
		}
	}
}
