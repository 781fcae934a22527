// Package nginx holds no code: its test runs the quick start at the top of
// nginx.conf, as a newcomer would, on ports of its own.
package nginx

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/nginxtest"
)

const root = "../.."

// TestQuickStart runs nginx.conf's commands from the repository's root —
// portero rls on the example configuration, nginx on this directory — with
// the ports moved to free ones, and asks nginx as the curl line does: the
// app answers 200 through Portero, and the eleventh request within the
// second is refused with 429, as examples/envoy/config/edge.yaml says.
func TestQuickStart(t *testing.T) {
	ngx := nginxtest.Binary(t)
	head, err := os.ReadFile("nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, l := range strings.Split(string(head), "\n") {
		if c, ok := strings.CutPrefix(l, "#   "); ok {
			cmds = append(cmds, c)
		}
	}
	want := []string{"portero rls --config examples/envoy/config &", `nginx -p "$PWD/examples/nginx" -c nginx.conf`, "curl -i http://127.0.0.1:8000/"}
	if fmt.Sprint(cmds) != fmt.Sprint(want) {
		t.Fatalf("nginx.conf's quick start is %q; this test runs %q: update it with the example", cmds, want)
	}

	// The example's ports, moved: Portero's HTTP (and gRPC), nginx's, the app's.
	rlsHTTP, rlsGRPC, listen, app := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	for name, subs := range map[string][][2]string{
		"nginx.conf":   {{"listen 127.0.0.1:9000;", "listen " + app + ";"}, {"pid /tmp/portero-nginx.pid;", "pid " + filepath.Join(dir, "nginx.pid") + ";"}},
		"portero.conf": {{"server 127.0.0.1:8082;", "server " + rlsHTTP + ";"}, {"server 127.0.0.1:9000;", "server " + app + ";"}, {"listen 8000;", "listen " + listen + ";"}},
	} {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range subs {
			if !bytes.Contains(data, []byte(s[0])) {
				t.Fatalf("%s no longer contains %q: update this test with the example", name, s[0])
			}
			data = bytes.ReplaceAll(data, []byte(s[0]), []byte(s[1]))
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	bin := filepath.Join(dir, "portero")
	if out, err := exec.Command("go", "build", "-o", bin, root+"/cmd/portero").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rls := exec.Command(bin, "rls", "--config", "examples/envoy/config", "--http-listen", rlsHTTP, "--grpc-listen", rlsGRPC, "--admin-listen", "off")
	rls.Dir = root
	startCmd(t, rls)
	nginx := exec.Command(ngx, "-p", dir, "-c", "nginx.conf", "-e", filepath.Join(dir, "error.log"))
	nginx.Dir = root
	startCmd(t, nginx)

	url := "http://" + listen + "/"
	var codes []int
	var first string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				first = string(body)
				break
			}
			codes = append(codes, resp.StatusCode)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s never answered 200 (answers %v, last error %v)", url, codes, err)
		}
	}
	if !strings.Contains(first, "hello from the app") {
		t.Errorf("GET / answered %q, want the app's answer", first)
	}
	// A fixed window of a second: if one starts in the middle of the burst,
	// the 429 comes later, never sooner than the eleventh request.
	refused := 0
	for i := 0; i < 30 && refused == 0; i++ {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 429 {
			refused++
			if resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		}
	}
	if refused == 0 {
		t.Error("30 requests in a row were never refused")
	}
}

// startCmd starts cmd, its output in a file kept for a failure (a pipe
// would stay open in nginx's workers), and stops it with SIGTERM when the
// test ends: nginx's master then stops its workers.
func startCmd(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "output")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("%s:\n%s", cmd.Path, b)
		}
		out.Close()
	})
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
