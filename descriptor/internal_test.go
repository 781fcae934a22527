package descriptor

import (
	"strings"
	"testing"
	"time"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, v string
		want       bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "ba", false},
		{"*", "", true}, {"*b", "ab", true}, {"*b", "ba", false},
		{"a*c*e", "abcde", true}, {"a*c*e", "ace", true}, {"a*c*e", "acd", false},
		{"a*a", "a", false}, {"a*a", "aa", true}, {"/api/*/export", "/api/v1/export", true},
		{"**", "x", true}, {"a**b", "ab", true},
	}
	for _, tt := range tests {
		if got := globMatch(strings.Split(tt.pattern, "*"), tt.v); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %t, want %t", tt.pattern, tt.v, got, tt.want)
		}
	}
}

func TestUnits(t *testing.T) {
	for _, s := range []string{"second", "SECOND", "Minute", "hour", "day", "week", "month", "year"} {
		u, err := ParseUnit(s)
		if err != nil || !u.Valid() || u.String() != strings.ToLower(s) {
			t.Errorf("ParseUnit(%q) = %v, %v", s, u, err)
		}
	}
	if Month.Duration() != 30*24*time.Hour || Year.Duration() != 365*24*time.Hour || Week != 7 {
		t.Error("month, year or week wrong")
	}
	if _, err := ParseUnit("unknown"); err == nil {
		t.Error(`ParseUnit("unknown") = nil error`)
	}
}
