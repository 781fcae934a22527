package server_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/internal/tlstest"
)

// TestTryHint runs the "try:" line serve prints, in a shell with the real
// curl, as a newcomer pastes it: it reaches the route the configuration
// has (here only under /api/), over TLS too, and its requests are
// answered by the upstream or refused, never 404 nor a failed handshake
// (000). A configuration whose every request needs an API key gets no
// hint: the hint cannot know a key.
func TestTryHint(t *testing.T) {
	curl := testenv.NeedCommand(t, "curl")
	dir := t.TempDir()
	cert, key := tlstest.NewCA(t, "hint CA").Server(t).Write(t, dir, "gateway")
	const routes = "upstreams: {d: {type: demo}}\n" +
		"routes: [{match: {methods: [POST], path: \"/**\"}, upstream: d}, {match: {path: \"/api/{version}/**\"}, upstream: d}]\n" +
		"rules: [{name: per-client, key: ip, algorithm: token-bucket, limit: 5/min burst 5}]\n"
	hint := regexp.MustCompile(`(?m)^portero: try: (.*)$`)
	for name, conf := range map[string]string{
		"plain": routes,
		"tls":   fmt.Sprintf("server: {tls: {cert_file: %s, key_file: %s}}\n", cert, key) + routes,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.yaml")
			writeFile(t, path, conf)
			r := start(t, server.Options{ConfigPath: path, AdminListen: "off"})
			waitFor(t, "the try line", func() bool { return hint.MatchString(r.out.String()) })
			line := hint.FindStringSubmatch(r.out.String())[1]
			cmd := exec.Command("sh", "-c", strings.Replace(line, "curl ", curl+" ", 1))
			out, err := cmd.Output()
			codes := strings.Fields(string(out))
			if err != nil || len(codes) != 12 || codes[0] != "200" || strings.Count(string(out), "429") != 7 {
				t.Errorf("%s printed %q (%v), want 5×200 then 7×429", line, out, err)
			}
		})
	}

	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeFile(t, path, routes+"plans: {gold: {rate: 10, burst: 10}}\napi_keys: {keys: [{id: acme, plan: gold, sha256: "+strings.Repeat("ab", 32)+"}]}\n")
	r := start(t, server.Options{ConfigPath: path, AdminListen: "off"})
	waitFor(t, "the config line", func() bool { return strings.Contains(r.out.String(), "portero: config ") })
	if m := hint.FindString(r.out.String()); m != "" {
		t.Errorf("with API keys: %q, want no hint (every request needs a key)", m)
	}
}
