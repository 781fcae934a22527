package server_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/testenv"
)

// startRedis runs a redis-server on a free loopback port for the test.
func startRedis(t *testing.T) string {
	t.Helper()
	bin := testenv.NeedCommand(t, "redis-server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
	}
	t.Fatal("redis-server did not start")
	return ""
}

// TestRedisSharedLimits: two gateway instances on one Redis share their
// counters, so that the limit holds across the fleet.
func TestRedisSharedLimits(t *testing.T) {
	addr := startRedis(t)
	path := filepath.Join(t.TempDir(), "redis.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
store: {type: redis, url: "redis://%s/0"}
upstreams: {d: {type: demo}}
routes: [{upstream: d}]
rules: [{name: shared, key: global, algorithm: fixed-window, limit: 4/h}]
`, addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	a := start(t, server.Options{ConfigPath: path, AdminListen: "off"})
	b := start(t, server.Options{ConfigPath: path, AdminListen: "off"})
	codes := map[int]int{}
	for i := range 8 {
		gw := a.gateway
		if i%2 == 1 {
			gw = b.gateway
		}
		code, _, _ := get(t, gw+"/")
		codes[code]++
	}
	if codes[200] != 4 || codes[429] != 4 {
		t.Errorf("8 requests over two instances: %v, want 4×200 and 4×429", codes)
	}
}
