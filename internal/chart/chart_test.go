package chart

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readHead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b[:min(len(b), 512)]
}

func TestBarsAndLines(t *testing.T) {
	dir := t.TempDir()
	series := []Series{
		{Name: "steps", X: []float64{0, 1, 2}, Y: []float64{0, 1, 3}, Step: true},
		{Name: "line", X: []float64{0, 2}, Y: []float64{1, 2}},
	}
	for _, tc := range []struct{ ext, magic string }{{".svg", "<svg"}, {".png", "\x89PNG"}, {".SVG", "<svg"}} {
		bars := filepath.Join(dir, "bars"+tc.ext)
		if err := Bars(bars, "figures", []string{"a", "b"}, []float64{20, 10}); err != nil {
			t.Fatalf("Bars(%s): %v", bars, err)
		}
		lines := filepath.Join(dir, "lines"+tc.ext)
		if err := Lines(lines, "over time", "t (s)", "n", series); err != nil {
			t.Fatalf("Lines(%s): %v", lines, err)
		}
		for _, p := range []string{bars, lines} {
			if !bytes.Contains(readHead(t, p), []byte(tc.magic)) {
				t.Errorf("%s is not a %s file", p, tc.ext)
			}
		}
	}
	// The SVG carries the text, so the figures can be read off it.
	svg, err := os.ReadFile(filepath.Join(dir, "bars.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"figures", ">a<", ">20<"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("bars.svg does not contain %q", want)
		}
	}
}

func TestChartErrors(t *testing.T) {
	dir := t.TempDir()
	ok := []Series{{Name: "s", X: []float64{0}, Y: []float64{1}}}
	for _, tc := range []struct {
		name string
		err  error
		msg  string
	}{
		{"bars gif", Bars(filepath.Join(dir, "x.gif"), "", []string{"a"}, []float64{1}), ".svg or .png"},
		{"bars no extension", Bars(filepath.Join(dir, "x"), "", []string{"a"}, []float64{1}), ".svg or .png"},
		{"bars mismatch", Bars(filepath.Join(dir, "x.svg"), "", []string{"a", "b"}, []float64{1}), "2 labels for 1 values"},
		{"bars empty", Bars(filepath.Join(dir, "x.svg"), "", nil, nil), "0 labels"},
		{"bars NaN", Bars(filepath.Join(dir, "x.svg"), "", []string{"a"}, []float64{math.NaN()}), "NaN"},
		{"lines pdf", Lines(filepath.Join(dir, "x.pdf"), "", "", "", ok), ".svg or .png"},
		{"lines none", Lines(filepath.Join(dir, "x.svg"), "", "", "", nil), "no series"},
		{"lines mismatch", Lines(filepath.Join(dir, "x.svg"), "", "", "", []Series{{Name: "s", X: []float64{0, 1}, Y: []float64{1}}}), "2 x and 1 y"},
		{"lines inf", Lines(filepath.Join(dir, "x.svg"), "", "", "", []Series{{Name: "s", X: []float64{0}, Y: []float64{math.Inf(1)}}}), "series \"s\""},
		{"missing directory", Bars(filepath.Join(dir, "no", "such", "x.svg"), "", []string{"a"}, []float64{1}), "x.svg"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, tc.err, tc.msg)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.svg")); err == nil {
		t.Error("a rejected chart left x.svg behind")
	}
}

func ExampleBars() {
	dir, _ := os.MkdirTemp("", "chart")
	defer os.RemoveAll(dir)
	err := Bars(filepath.Join(dir, "burst.svg"), "Most let through in any 1 s",
		[]string{"fixed-window", "sliding-log"}, []float64{20, 10})
	if err != nil {
		panic(err)
	}
	err = Lines(filepath.Join(dir, "over-time.png"), "Let through over time", "time (s)", "requests",
		[]Series{{Name: "fixed-window", X: []float64{0, 0.9, 1.1}, Y: []float64{0, 10, 20}, Step: true}})
	if err != nil {
		panic(err)
	}
	// Output:
}
