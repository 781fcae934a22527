package deploy

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	dir := t.TempDir()
	name := filepath.Join(dir, "ratelimit")
	if err := os.Symlink(bin, name); err != nil {
		t.Fatal(err)
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
	cmd := exec.Command(name)
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
