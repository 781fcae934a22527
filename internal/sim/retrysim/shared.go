package retrysim

import "github.com/portero-rl/portero/internal/chart"

// attempt is attempt n (from 1) of request, or client, req.
type attempt struct{ req, n int }

// steps draws a result's Series as staircases over time to path.
func steps(path, title, ylabel string, r interface {
	Series() ([]string, []float64, [][]float64)
}) ([]string, error) {
	names, t, values := r.Series()
	series := make([]chart.Series, len(names))
	for i, name := range names {
		series[i] = chart.Series{Name: name, X: t, Y: values[i], Step: true}
	}
	if err := chart.Lines(path, title, "time (s)", ylabel, series); err != nil {
		return nil, err
	}
	return []string{path}, nil
}
