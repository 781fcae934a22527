package fileerr_test

import (
	"testing"

	"github.com/portero-rl/portero/internal/config/fileerr"
)

func TestFormat(t *testing.T) {
	for _, tt := range []struct {
		file         string
		line, column int
		field, msg   string
		want         string
	}{
		{"p.yaml", 12, 0, "rules[2].limit", "bad", "p.yaml:12: rules[2].limit: bad"},
		{"p.yaml", 12, 5, "rules[2].limit", "bad", "p.yaml:12:5: rules[2].limit: bad"},
		{"p.yaml", 0, 5, "descriptors", "bad", "p.yaml: descriptors: bad"}, // no column without a line
		{"p.yaml", 3, 0, "", "did not find expected key", "p.yaml:3: did not find expected key"},
		{"p.yaml", 0, 0, "", "empty", "p.yaml: empty"},
	} {
		if got := fileerr.Format(tt.file, tt.line, tt.column, tt.field, tt.msg); got != tt.want {
			t.Errorf("Format(%q, %d, %d, %q, %q) = %q, want %q", tt.file, tt.line, tt.column, tt.field, tt.msg, got, tt.want)
		}
	}
}

// TestUnknown: a misspelt field gets the nearest known one (a swap of two
// letters is two edits), a far one the list of known fields.
func TestUnknown(t *testing.T) {
	known := []string{"key", "value", "rate_limit"}
	for typed, want := range map[string]string{
		"kye":       "unknown field; did you mean key?",
		"valeu":     "unknown field; did you mean value?",
		"ratelimit": "unknown field; did you mean rate_limit?",
		"frobs":     "unknown field (known here: key, value, rate_limit)",
	} {
		if got := fileerr.Unknown(typed, known); got != want {
			t.Errorf("Unknown(%q) = %q, want %q", typed, got, want)
		}
	}
}
