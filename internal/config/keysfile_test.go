package config

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero/internal/apikey"
)

// readKeys reads data as the keys file keys.yaml, keeping every key as
// read.
func readKeys(t testing.TB, data string) ([]APIKey, Errors) {
	t.Helper()
	var keys []APIKey
	kr := &keysReader{file: "keys.yaml", seqIndent: -1, add: func(k APIKey) (string, error) { keys = append(keys, k); return "", nil }}
	if err := kr.read(strings.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	return keys, kr.errs
}

var keysSeeds = []string{
	"keys:\n  - {id: a, plan: gold, sha256: " + apikey.Hash("a") + "}\n",
	"# c\n---\nkeys: # c\n- {id: 'a''b', plan: \"gold\", sha256: x}   # c\n-   {id: a,plan: b , }\n",
	"keys:\n  - id: a\n    plan: gold\n    sha256: x # c\n\n  -\n    id: b\n    plan: ~\n",
	"keys: []\n",
	"keys:\n",
	"keys: null\n",
	"\xef\xbb\xbfkeys:\r\n  - {id: a:b, plan: g-1, sha256: 0x1F}\r\n",
	"keys:\n  - {id: a b, plan: 1.5, sha256: true}\n  - {id: -a, plan: a:b, sha256: x}\n  - id: :c\n",
}

// FuzzKeysFile: a keys file this reader reads without error means what
// yaml.v3 reads in it (strictly: unknown fields are errors there too), key
// for key; and whatever the input, the reader neither panics nor reports an
// error without a line.
func FuzzKeysFile(f *testing.F) {
	for _, s := range keysSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		keys, errs := readKeys(t, data)
		for _, e := range errs {
			if e.Line == 0 && !strings.HasPrefix(e.Msg, "and ") && !strings.HasPrefix(e.Msg, "larger than") {
				t.Fatalf("an error without a line: %v", e)
			}
		}
		if len(errs) > 0 {
			return
		}
		var want struct {
			Keys []APIKey `yaml:"keys"`
		}
		dec := yaml.NewDecoder(strings.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("read %d keys from %q; yaml.v3: %v", len(keys), data, err)
		}
		if !slices.Equal(keys, want.Keys) && !(len(keys) == 0 && len(want.Keys) == 0) {
			t.Fatalf("%q: read %+v; yaml.v3 reads %+v", data, keys, want.Keys)
		}
	})
}

// TestKeysFileSeeds: the shapes the reader takes, read as yaml.v3 reads
// them.
func TestKeysFileSeeds(t *testing.T) {
	for _, s := range keysSeeds {
		if _, errs := readKeys(t, s); len(errs) > 0 {
			t.Errorf("%q: %v", s, errs)
		}
	}
	keys, _ := readKeys(t, keysSeeds[2])
	if want := []APIKey{{ID: "a", Plan: "gold", SHA256: "x"}, {ID: "b"}}; !slices.Equal(keys, want) {
		t.Errorf("block mappings: %+v, want %+v", keys, want)
	}
}

// TestKeysFileErrors: every problem of a keys file at once, each with its
// line, column and field; what is not read is refused, never misread.
func TestKeysFileErrors(t *testing.T) {
	h := apikey.Hash("k")
	data := strings.Join([]string{
		"keys:",
		"  - {id: a, plan: gold, sha256: " + h + "}",
		"  - {id: b, plan: gold, sha265: " + h + "}",
		"  - {id: c, plan: gold, sha256: " + h + ", plan: gold}",
		"  - {id: d, plan: gold, sha256: " + h,
		"  - {id: *e, plan: gold, sha256: " + h + "}",
		"  - {id: \"f\\n\", plan: gold}",
		"  - id: g",
		"    plan: gold",
		"      sha256: " + h,
		"\t- {id: h}",
		"  - {id: i, plan: gold, sha256: " + h + "} trailing",
		"kyes: x",
		"keys: [{id: j}]",
	}, "\n") + "\n"
	_, errs := readKeys(t, data)
	got := errs.Error()
	for _, want := range []string{
		"keys.yaml:3:25: keys[1].sha265: unknown field; did you mean sha256?",
		"keys.yaml:4:99: keys[2].plan: given twice",
		"keys.yaml:5:97: keys[3]: unclosed {: a key's {id: ..., plan: ..., sha256: ...} closes on its line",
		"keys.yaml:6:10: keys[4].id: '*' starts no value a keys file reads",
		"keys.yaml:7:10: keys[5].id: an escape (\\) is not read in a keys file",
		"keys.yaml:10:7: keys[6]: want one - {id: ..., plan: ..., sha256: ...} per key",
		"keys.yaml:11:1: a tab: a keys file separates and indents with spaces",
		"keys.yaml:12:99: keys[7]: unexpected text after }",
		"keys.yaml:13:1: kyes: unknown field; did you mean keys?",
		"keys.yaml:14:1: keys: given twice",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("got:\n%s", got)
	}
	if _, errs := readKeys(t, "# nothing\n\n"); len(errs) != 1 || !strings.Contains(errs[0].Msg, "empty keys file") {
		t.Errorf("a file of comments: %v", errs)
	}
	if _, errs := readKeys(t, "keys:\n  - {id: a, plan: "+strings.Repeat("x", maxKeysLine)+"}\n"); len(errs) != 1 || errs[0].Line != 2 || !strings.Contains(errs[0].Msg, "longer than 64 KiB") {
		t.Errorf("a line of 64 KiB: %v", errs)
	}
	var many strings.Builder
	many.WriteString("keys:\n")
	for range maxKeysErrors + 5 {
		many.WriteString("  - nope\n")
	}
	if _, errs := readKeys(t, many.String()); len(errs) != maxKeysErrors+1 || errs[maxKeysErrors].Msg != "and 5 more errors" {
		t.Errorf("%d bad lines: %d errors, the last %v", maxKeysErrors+5, len(errs), errs[len(errs)-1])
	}
}

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
