package config

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/apikey"
)

// writeKeysFile writes a configuration of two plans and a keys file of n
// keys beside it, and returns the configuration's path.
func writeKeysFile(t testing.TB, dir string, n int) string {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "keys.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("# generated\nkeys:\n")
	plans := [2]string{"gold", "basic"}
	for i := range n {
		fmt.Fprintf(w, "  - {id: caller-%07d, plan: %s, sha256: %s}\n", i, plans[i%2], apikey.Hash(fmt.Sprint("key-", i)))
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "portero.yaml")
	cfg := "upstreams: {api: {url: \"http://127.0.0.1:3000\"}}\nroutes: [{upstream: api}]\n" +
		"plans: {gold: {rate: 100}, basic: {rate: 10}}\napi_keys: {file: keys.yaml}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// heapInUse returns the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestKeysFileMillion: a keys file of a million keys (about 100 MB) loads,
// every key found by its key, and what the configuration keeps of it is at
// most 300 bytes a key (the heap in use after a collection), read as it
// streams.
func TestKeysFileMillion(t *testing.T) {
	const n = 1_000_000
	path := writeKeysFile(t, t.TempDir(), n)
	before := heapInUse()
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	perKey := float64(heapInUse()-before) / n
	t.Logf("%d keys: %.0f B a key in use after a collection", n, perKey)
	if c.Gateway.Keys.Len() != n {
		t.Fatalf("%d keys loaded, want %d", c.Gateway.Keys.Len(), n)
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		if k, ok := c.Gateway.Keys.Lookup(fmt.Sprint("key-", i)); !ok || k.ID != fmt.Sprintf("caller-%07d", i) {
			t.Errorf("key %d: %+v, %v", i, k, ok)
		}
	}
	if perKey > 300 {
		t.Errorf("%.0f B a key in use, want at most 300", perKey)
	}
	runtime.KeepAlive(c)
}

// TestKeysFileLargerThanAConfiguration: a keys file is not bounded by the
// configuration's 16 MiB, and a bad one is refused whole with all its
// errors.
func TestKeysFileLargerThanAConfiguration(t *testing.T) {
	dir := t.TempDir()
	path := writeKeysFile(t, dir, 200_000) // about 21 MB
	c, err := Load(path)
	if err != nil || c.Gateway.Keys.Len() != 200_000 {
		t.Fatalf("200,000 keys: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "keys.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("  - {id: x, plan: silver, sha256: " + apikey.Hash("x") + "}\n  - {id: y, plan: gold, sha256: nope}\n")
	f.Close()
	_, err = Load(path)
	if err == nil || !strings.Contains(err.Error(), "keys.yaml:200003:19: keys[200000].plan: \"silver\": no such plan") ||
		!strings.Contains(err.Error(), "keys.yaml:200004:33: keys[200001].sha256: \"nope\"") {
		t.Errorf("a bad key at the end of 200,000: %v", err)
	}
}
