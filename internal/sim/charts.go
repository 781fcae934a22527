package sim

import (
	"strconv"

	"github.com/portero-rl/portero/internal/chart"
)

// BurstResults are the burst experiment's outcomes, one per algorithm.
type BurstResults []BurstResult

// Table returns the experiment's figures, one row per algorithm.
func (res BurstResults) Table() Table {
	t := Table{Header: []string{"algorithm", "max_admitted_in_any_window"}}
	for _, r := range res {
		t.Rows = append(t.Rows, []string{string(r.Algorithm), strconv.Itoa(r.Max)})
	}
	return t
}

// Charts draws the burst experiment: the figures as bars in path, and
// every algorithm's cumulative throughput over trace time as steps in a
// second file named after path with "-over-time" before the extension. It
// returns the files it wrote.
func (res BurstResults) Charts(path string) ([]string, error) {
	labels := make([]string, len(res))
	values := make([]float64, len(res))
	series := make([]chart.Series, len(res))
	for i, r := range res {
		labels[i] = string(r.Algorithm)
		values[i] = float64(r.Max)
		// A staircase from (0, 0) through (t_k, k) for the k-th request
		// through, to the end of the trace.
		s := chart.Series{Name: string(r.Algorithm), Step: true, X: []float64{0}, Y: []float64{0}}
		for k, t := range r.Through {
			s.X = append(s.X, t.Seconds())
			s.Y = append(s.Y, float64(k+1))
		}
		end := 0.0
		if n := len(r.Results); n > 0 {
			end = r.Results[n-1].At.Seconds()
		}
		if last := s.X[len(s.X)-1]; last > end {
			end = last
		}
		s.X = append(s.X, end+0.5)
		s.Y = append(s.Y, float64(len(r.Through)))
		series[i] = s
	}
	overTime := chart.Beside(path, "-over-time")
	if err := chart.Bars(path, "Most let through in any 1 s (burst experiment)", labels, values); err != nil {
		return nil, err
	}
	if err := chart.Lines(overTime, "Requests let through over time (queue: departures)", "trace time (s)", "requests let through", series); err != nil {
		return nil, err
	}
	return []string{path, overTime}, nil
}
