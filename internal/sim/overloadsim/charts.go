package overloadsim

import "github.com/portero-rl/portero/internal/chart"

// Charts draws the overload experiment to path (.svg or .png): every mode's
// answers in time so far over the run, and all the unbounded queue's
// answers, which keep growing at capacity while its answers in time stop
// after a few seconds. It returns the files it wrote.
func (r *OverloadResult) Charts(path string) ([]string, error) {
	var series []chart.Series
	for i, row := range r.Rows {
		series = append(series, chart.Series{Name: row.Mode + ": in time", X: r.Seconds, Y: cumulative(r.Goodput[i])})
	}
	series = append(series, chart.Series{Name: r.Rows[0].Mode + ": all answers", X: r.Seconds, Y: cumulative(r.Throughput[0])})
	if err := chart.Lines(path, "150 req/s to a service of 100 req/s; clients give up after 2 s", "time (s)", "answers so far", series); err != nil {
		return nil, err
	}
	return []string{path}, nil
}

// cumulative returns the running sums of per-second counts, as of the end
// of each second.
func cumulative(perSecond []float64) []float64 {
	out := make([]float64, len(perSecond))
	sum := 0.0
	for i, v := range perSecond {
		sum += v
		out[i] = sum
	}
	return out
}

// Charts draws the noisy-neighbour experiment to path: the share of each
// class's requests served, under each policy.
func (r *NoisyResult) Charts(path string) ([]string, error) {
	labels := make([]string, len(r.Rows))
	values := make([]float64, len(r.Rows))
	for i, row := range r.Rows {
		labels[i] = row.Policy + " / " + row.Class
		values[i] = float64(int(row.Ratio*1000+0.5)) / 1000
	}
	if err := chart.Bars(path, "Share of requests served: 30 small tenants and one noisy neighbour", labels, values); err != nil {
		return nil, err
	}
	return []string{path}, nil
}

// Charts draws the Little's law experiment: requests admitted per second
// against the service time in path, and the requests in flight in a second
// file named after path with "-in-flight" before the extension.
func (r *LittleResult) Charts(path string) ([]string, error) {
	admitted, inFlight := map[string]*chart.Series{}, map[string]*chart.Series{}
	var order []string
	for _, row := range r.Rows {
		if admitted[row.Limiter] == nil {
			order = append(order, row.Limiter)
			admitted[row.Limiter] = &chart.Series{Name: row.Limiter + " limit"}
			inFlight[row.Limiter] = &chart.Series{Name: row.Limiter + " limit"}
		}
		s := row.ServiceTime.Seconds()
		a, f := admitted[row.Limiter], inFlight[row.Limiter]
		a.X, a.Y = append(a.X, s), append(a.Y, row.Admitted)
		f.X, f.Y = append(f.X, s), append(f.Y, row.InFlight)
	}
	var as, fs []chart.Series
	for _, l := range order {
		as, fs = append(as, *admitted[l]), append(fs, *inFlight[l])
	}
	second := chart.Beside(path, "-in-flight")
	if err := chart.Lines(path, "Admitted per second: concurrency limit 30 vs rate limit 120/s", "service time (s)", "requests admitted per second", as); err != nil {
		return nil, err
	}
	if err := chart.Lines(second, "In flight (Little's law: L = λ·W)", "service time (s)", "requests in flight", fs); err != nil {
		return nil, err
	}
	return []string{path, second}, nil
}
