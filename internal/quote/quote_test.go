package quote_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/portero-rl/portero/internal/quote"
)

func TestInput(t *testing.T) {
	long := strings.Repeat("1", 65536)
	for _, c := range []struct{ in, want string }{
		{"", `""`},
		{"abc", `"abc"`},
		{"a\nb\x00", `"a\nb\x00"`},
		{strings.Repeat("x", quote.MaxInput), `"` + strings.Repeat("x", quote.MaxInput) + `"`},
		{long, `"` + strings.Repeat("1", quote.MaxInput) + `"… (65536 bytes)`},
		// A cut never splits a character: "é" is two bytes.
		{strings.Repeat("x", quote.MaxInput-1) + "éé", `"` + strings.Repeat("x", quote.MaxInput-1) + `"… (67 bytes)`},
	} {
		if got := quote.Input(c.in); got != c.want {
			t.Errorf("Input(%.20q…) = %s, want %s", c.in, got, c.want)
		}
	}
	if got, want := quote.Cut("descriptors[0].limit"), "descriptors[0].limit"; got != want {
		t.Errorf("Cut(%q) = %q", want, got)
	}
	if got, want := quote.Cut(long), strings.Repeat("1", quote.MaxInput)+"…"; got != want {
		t.Errorf("Cut of 64 KiB = %q, want %q", got, want)
	}
	if got := quote.Input(long); len(got) > 100 || !utf8.ValidString(got) {
		t.Errorf("Input of 64 KiB = %d bytes", len(got))
	}
}
