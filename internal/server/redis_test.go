package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/server"
)

// TestRedisSharedLimits: two gateway instances on one Redis share their
// counters, so that the limit holds across the fleet.
func TestRedisSharedLimits(t *testing.T) {
	addr := redistest.Start(t).Addr()
	path := filepath.Join(t.TempDir(), "redis.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
# A generous deadline and on_error: deny, so that a slow machine shows up
# as a 503 in the failure message rather than as a request let through.
store: {type: redis, url: "redis://%s/0", timeout: 2s, on_error: deny}
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
