package sfv

import (
	"testing"

	"github.com/dunglas/httpsfv"
)

func TestAppendString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"per-ip", `"per-ip"`},
		{"", `""`},
		{`a"b\c`, `"a\"b\\c"`},
		{"tab\there é", `"tab?here ??"`},
	} {
		got := string(AppendString(nil, tc.in))
		if got != tc.want {
			t.Errorf("AppendString(%q) = %s, want %s", tc.in, got, tc.want)
		}
		// What it writes parses as an sf-string item.
		if _, err := httpsfv.UnmarshalItem([]string{got}); err != nil {
			t.Errorf("AppendString(%q) = %s, which does not parse as an sf-string: %v", tc.in, got, err)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"per-ip", `"\`, "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := string(AppendString(nil, s))
		item, err := httpsfv.UnmarshalItem([]string{out})
		if err != nil {
			t.Fatalf("AppendString(%q) = %s: %v", s, out, err)
		}
		if v, ok := item.Value.(string); !ok || len(v) != len(s) {
			t.Fatalf("AppendString(%q) = %s parsed as %#v: want a string of %d bytes", s, out, item.Value, len(s))
		}
	})
}
