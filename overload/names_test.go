package overload

import (
	"strings"
	"testing"
)

func TestParseNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"critical", "critical", true}, {"CRITICAL", "critical", true}, {"Default", "default", true},
		{"sheddable", "sheddable", true}, {"low", "", false}, {"", "", false},
	} {
		p, err := ParsePriority(tc.in)
		if (err == nil) != tc.ok || (tc.ok && p.String() != tc.want) {
			t.Errorf("ParsePriority(%q) = %v, %v; want %q, ok %v", tc.in, p, err, tc.want, tc.ok)
		}
	}
	for in, want := range map[string]Order{"fifo": FIFO, "wine": FIFO, "LIFO": LIFO, "milk": LIFO} {
		if o, err := ParseOrder(in); err != nil || o != want {
			t.Errorf("ParseOrder(%q) = %v, %v; want %v", in, o, err, want)
		}
	}
	if _, err := ParseOrder("random"); err == nil || !strings.Contains(err.Error(), `"random"`) {
		t.Errorf(`ParseOrder("random") = %v, want an error naming it`, err)
	}
	for in, want := range map[string]Shedding{"by-order": ByOrder, "FAIR": Fair, "random": Random} {
		if s, err := ParseShedding(in); err != nil || s != want {
			t.Errorf("ParseShedding(%q) = %v, %v; want %v", in, s, err, want)
		}
	}
	if _, err := ParseShedding("lottery"); err == nil {
		t.Error(`ParseShedding("lottery") succeeded`)
	}
	// Values outside the classes count as the nearest one.
	if Priority(-5).index() != 0 || Priority(9).index() != 2 {
		t.Error("out-of-range priorities do not clamp")
	}
}

// FuzzParse: every parser either refuses its input or returns a value whose
// name reads back as the same value.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"critical", "Default", "sheddable", "fifo", "milk", "fair", "by-order", "", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := ParsePriority(s); err == nil {
			if q, err := ParsePriority(p.String()); err != nil || q != p || !strings.EqualFold(s, p.String()) {
				t.Errorf("ParsePriority(%q) = %v, which reads back as %v, %v", s, p, q, err)
			}
		}
		if o, err := ParseOrder(s); err == nil {
			if q, err := ParseOrder(o.String()); err != nil || q != o {
				t.Errorf("ParseOrder(%q) = %v, which reads back as %v, %v", s, o, q, err)
			}
		}
		if v, err := ParseShedding(s); err == nil {
			if q, err := ParseShedding(v.String()); err != nil || q != v {
				t.Errorf("ParseShedding(%q) = %v, which reads back as %v, %v", s, v, q, err)
			}
		}
	})
}
