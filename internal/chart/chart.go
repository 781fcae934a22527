// Package chart draws the simple charts of Portero's experiments — bars, and
// lines or steps — to an SVG or PNG file chosen by the file's extension. It
// wraps gonum.org/v1/plot so that experiments say what to draw, not how.
package chart

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Size of every chart.
const (
	width  = 16 * vg.Centimeter
	height = 10 * vg.Centimeter
)

// Series is one line of a line chart: points (X[i], Y[i]). X and Y must have
// the same length, at least one point, and finite values.
type Series struct {
	Name string
	X, Y []float64
	// Step draws the series as a staircase that holds each Y until the next
	// X (a count that changes at instants), rather than straight segments.
	Step bool
}

// CheckPath reports whether path has an extension this package can write:
// ".svg" or ".png" (in any case).
func CheckPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("chart %q: want a file name ending in .svg or .png", path)
}

// Beside names a second chart of the same experiment: path with suffix
// before its extension ("burst.svg", "-over-time": "burst-over-time.svg").
func Beside(path, suffix string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + suffix + ext
}

// Bars draws one bar per label with the given values and writes it to path
// (.svg or .png). labels and values must have the same, non-zero length.
func Bars(path, title string, labels []string, values []float64) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	if len(labels) != len(values) || len(labels) == 0 {
		return fmt.Errorf("chart %q: %d labels for %d values", path, len(labels), len(values))
	}
	for i, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("chart %q: value %d (%s) is %v", path, i, labels[i], v)
		}
	}
	p := plot.New()
	p.Title.Text = title
	bars, err := plotter.NewBarChart(plotter.Values(values), vg.Length(float64(width)*0.6/float64(len(values))))
	if err != nil {
		return fmt.Errorf("chart %q: %w", path, err)
	}
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	p.Add(bars, plotter.NewGrid())
	p.NominalX(labels...)
	p.Y.Min = math.Min(0, p.Y.Min)
	// Write the values above the bars, so the figures can be read exactly.
	pts := make(plotter.XYs, len(values))
	text := make([]string, len(values))
	for i, v := range values {
		pts[i] = plotter.XY{X: float64(i), Y: v}
		text[i] = fmt.Sprint(v)
	}
	labelsPlot, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: text})
	if err != nil {
		return fmt.Errorf("chart %q: %w", path, err)
	}
	for i := range labelsPlot.TextStyle {
		labelsPlot.TextStyle[i].XAlign = -0.5 // centred over the bar
		labelsPlot.TextStyle[i].YAlign = 0    // just above it
	}
	p.Add(labelsPlot)
	p.Y.Max *= 1.08 // room for the labels
	return save(p, path)
}

// Lines draws every series as a line (or a staircase, see Series.Step) with
// a legend and writes the chart to path (.svg or .png).
func Lines(path, title, xlabel, ylabel string, series []Series) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	if len(series) == 0 {
		return fmt.Errorf("chart %q: no series", path)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for i, s := range series {
		if len(s.X) != len(s.Y) || len(s.X) == 0 {
			return fmt.Errorf("chart %q: series %q has %d x and %d y values", path, s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, len(s.X))
		for j := range s.X {
			xys[j] = plotter.XY{X: s.X[j], Y: s.Y[j]}
		}
		l, err := plotter.NewLine(xys) // rejects NaN and infinities
		if err != nil {
			return fmt.Errorf("chart %q: series %q: %w", path, s.Name, err)
		}
		if s.Step {
			l.StepStyle = plotter.PostStep
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	// From zero, and with a band above the data for the legend, which
	// would otherwise hide lines that run along the top.
	p.Y.Min = math.Min(0, p.Y.Min)
	p.Y.Max += 0.06 * float64(len(series)+1) * (p.Y.Max - p.Y.Min)
	return save(p, path)
}

func save(p *plot.Plot, path string) error {
	if err := p.Save(width, height, path); err != nil {
		return fmt.Errorf("chart %q: %w", path, err)
	}
	return nil
}
