package apikey

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero/internal/config/fileerr"
)

// readKeys reads data as the keys file keys.yaml, keeping every key as
// read.
func readKeys(t testing.TB, data string) ([]Entry, []*fileerr.Error) {
	t.Helper()
	var keys []Entry
	kr := &keysReader{file: "keys.yaml", seqIndent: -1, add: func(k Entry) (string, error) { keys = append(keys, k); return "", nil }}
	if err := kr.read(strings.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	return keys, kr.errs
}

var keysSeeds = []string{
	"keys:\n  - {id: a, plan: gold, sha256: " + Hash("a") + "}\n",
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
			Keys []Entry `yaml:"keys"`
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
	if want := []Entry{{ID: "a", Plan: "gold", SHA256: "x"}, {ID: "b"}}; !slices.Equal(keys, want) {
		t.Errorf("block mappings: %+v, want %+v", keys, want)
	}
}

// TestKeysFileErrors: every problem of a keys file at once, each with its
// line, column and field; what is not read is refused, never misread.
func TestKeysFileErrors(t *testing.T) {
	h := Hash("k")
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
	var lines []string
	for _, e := range errs {
		lines = append(lines, e.Error())
	}
	got := strings.Join(lines, "\n")
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

// BenchmarkKeysFile: reading a keys file of flow items, per key, by this
// reader and by yaml.v3 decoding each item alone (the other way to stream
// one: its Decoder holds a whole document).
func BenchmarkKeysFile(b *testing.B) {
	const n = 10_000
	var file strings.Builder
	file.WriteString("keys:\n")
	items := make([][]byte, n)
	for i := range n {
		line := fmt.Sprintf("  - {id: caller-%07d, plan: gold, sha256: %s}\n", i, Hash(fmt.Sprint("key-", i)))
		file.WriteString(line)
		items[i] = []byte(line)
	}
	b.Run("reader", func(b *testing.B) {
		for range b.N {
			kr := &keysReader{file: "keys.yaml", seqIndent: -1, add: func(Entry) (string, error) { return "", nil }}
			if err := kr.read(strings.NewReader(file.String())); err != nil || len(kr.errs) > 0 {
				b.Fatal(err, kr.errs)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
	})
	b.Run("yaml.v3-per-item", func(b *testing.B) {
		for range b.N {
			for _, item := range items {
				var keys []Entry
				if err := yaml.Unmarshal(item, &keys); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
	})
}
