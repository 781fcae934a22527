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
