package deploy

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/redistest"
)

// TestRatelimitName: the image has /bin/ratelimit, the command
// envoyproxy/ratelimit's image runs, and the binary run under that name
// with only envoyproxy/ratelimit's environment (a Helm chart's variables, a
// runtime directory, Redis over TCP) is its rate limit service: it starts,
// answers /healthcheck and a /json call, and stops on SIGTERM.
func TestRatelimitName(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"ln -s /usr/local/bin/portero /out/bin/ratelimit", "COPY --from=build /out/bin/ /bin/"} {
		if !strings.Contains(string(data), line) {
			t.Errorf("Dockerfile: no %q: the image would have no /bin/ratelimit", line)
		}
	}
	bin := buildAsDockerfile(t, readDockerfile(t))
	runRatelimit(t, bin, []string{"/bin/ratelimit"})
}

// TestRatelimitImage: the Dockerfile's ratelimit target is
// envoyproxy/ratelimit's image: it runs the rate limit service with the
// argv Docker and Kubernetes give it for each way its users start that
// image — no command (the ENTRYPOINT and the CMD, of which there is
// none), a compose file's "command: /bin/ratelimit" (replacing the CMD:
// appended to the ENTRYPOINT; envoyproxy/ratelimit ignores arguments),
// and Kubernetes' or a Helm chart's command: ["/bin/ratelimit"] with no
// args (replacing the ENTRYPOINT, the CMD dropped). Portero's default
// image started by that compose file runs it too.
func TestRatelimitImage(t *testing.T) {
	d := readDockerfile(t)
	target := d.stages["ratelimit"]
	if target == nil {
		t.Fatal("Dockerfile: no stage named ratelimit (docker build --target ratelimit)")
	}
	if !slices.Equal(target.entrypoint, []string{"/bin/ratelimit"}) || target.cmd != nil {
		t.Errorf("ratelimit target: ENTRYPOINT %q CMD %q, want [/bin/ratelimit] and none, as envoyproxy/ratelimit's image", target.entrypoint, target.cmd)
	}
	bin := buildAsDockerfile(t, d)
	compose := []string{"/bin/ratelimit"} // command: /bin/ratelimit
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"no command", append(slices.Clone(target.entrypoint), target.cmd...)},
		{"compose command", append(slices.Clone(target.entrypoint), compose...)},
		{"kubernetes command", []string{"/bin/ratelimit"}},
		{"default image, compose command", append(slices.Clone(d.entrypoint), compose...)},
	} {
		t.Run(c.name, func(t *testing.T) { runRatelimit(t, bin, c.argv) })
	}
}

// runRatelimit runs bin as the image would with argv (its first word the
// path in the image: /bin/ratelimit, a symlink to the binary, or the
// binary's own path) and only envoyproxy/ratelimit's environment (a Helm
// chart's variables, a runtime directory, Redis over TCP): it must start,
// answer /healthcheck and /json calls, and stop on SIGTERM.
func runRatelimit(t *testing.T, bin string, argv []string) {
	t.Helper()
	dir := t.TempDir()
	name := filepath.Join(dir, "ratelimit")
	if err := os.Symlink(bin, name); err != nil {
		t.Fatal(err)
	}
	path := map[string]string{"/bin/ratelimit": name, "/usr/local/bin/portero": bin}[argv[0]]
	if path == "" {
		t.Fatalf("argv %q: %s is not in the image", argv, argv[0])
	}
	rt := filepath.Join(dir, "srv", "current")
	if err := os.MkdirAll(filepath.Join(rt, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: year, requests_per_unit: 2}\n" // a year: no window ends between the calls
	if err := os.WriteFile(filepath.Join(rt, "ratelimit", "config", "edge.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	port := func() string { _, p, _ := net.SplitHostPort(freeAddr(t)); return p }
	httpPort := port()
	cmd := &exec.Cmd{Path: path, Args: argv}
	cmd.Env = []string{"RUNTIME_ROOT=" + rt, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=" + httpPort, "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(), "DEBUG_PORT=" + port(),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr(), "USE_STATSD=false", "LOG_LEVEL=warn"}
	exited, stderr := start(t, cmd)
	base := "http://127.0.0.1:" + httpPort
	waitStatus(t, base+"/healthcheck", 200, exited, stderr)
	body := `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`
	for i, want := range []int{200, 200, 429} {
		r, err := http.Post(base+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != want {
			t.Errorf("/json call %d = %d %s, want %d", i, r.StatusCode, b, want)
		}
	}
	stop(t, cmd, exited, stderr)
}
