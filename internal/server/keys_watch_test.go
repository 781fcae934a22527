package server_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/watch"
)

// TestKeysFileReloads: a key added to the API keys file works without a
// restart (the keys file is watched beside the configuration), a removed
// one stops working, and a bad file changes nothing, in a log line that
// names the keys file's change as the reason (not a signal).
func TestKeysFileReloads(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "portero.yaml"), "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n"+
		"plans: {gold: {rate: 100}}\napi_keys: {file: keys.yaml}\n")
	keys := filepath.Join(dir, "keys.yaml")
	line := func(id, key string) string {
		return "  - {id: " + id + ", plan: gold, sha256: " + apikey.Hash(key) + "}\n"
	}
	writeFile(t, keys, "keys:\n"+line("a", "key-a"))
	r := start(t, server.Options{ConfigPath: filepath.Join(dir, "portero.yaml"), AdminListen: "off", Watch: true,
		WatchOptions: watch.Options{Settle: 20 * time.Millisecond, Poll: 50 * time.Millisecond}})
	code := func(key string) int { c, _, _ := get(t, r.gateway+"/", "X-API-Key", key); return c }
	if code("key-a") != 200 || code("key-b") != 403 {
		t.Fatalf("before: key-a %d, key-b %d; want 200, 403", code("key-a"), code("key-b"))
	}
	writeFile(t, keys, "keys:\n"+line("b", "key-b"))
	waitFor(t, "key-b to work", func() bool { return code("key-b") == 200 })
	if c := code("key-a"); c != 403 {
		t.Errorf("a removed key answers %d, want 403", c)
	}
	// A bad keys file is refused whole: its good key does not work, the
	// keys in use still do, and the log names the bad line.
	writeFile(t, keys, "keys:\n"+line("b", "key-b")+line("c", "key-c")+"  - {id: d, plan: silver, sha256: "+apikey.Hash("key-d")+"}\n")
	waitFor(t, "the bad keys file to be refused", func() bool {
		return strings.Contains(r.logs.String(), `keys.yaml:4:19: keys[2].plan: \"silver\": no such plan`)
	})
	if code("key-b") != 200 || code("key-c") != 403 {
		t.Errorf("after a bad keys file: key-b %d, key-c %d; want 200 (kept), 403 (not applied)", code("key-b"), code("key-c"))
	}
	refused := false
	for _, l := range strings.Split(r.logs.String(), "\n") {
		if !strings.Contains(l, "configuration refused") {
			continue
		}
		refused = true
		if !strings.Contains(l, `reason="API keys file change"`) {
			t.Errorf("log line %q: want reason=\"API keys file change\"", l)
		}
	}
	if !refused {
		t.Error("no \"configuration refused\" log line for the bad keys file")
	}
}
