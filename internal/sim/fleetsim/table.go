package fleetsim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/portero-rl/portero/internal/chart"
	"github.com/portero-rl/portero/internal/sim"
)

// Table is the experiment's figures: a row per mode and fleet size, and,
// in the summary, what was simulated and a chart of each worst window
// against the limit.
func (r *Result) Table() sim.Table {
	c := r.Config
	t := sim.Table{
		Summary: []string{
			fmt.Sprintf("%d windows of %v; each instance offered %v requests/s (90%% one hot key, 10%% %d cold keys; 40%% in bursts of %d); limits: half the offer; budget %v.",
				c.Windows, c.Window, c.Rate, c.ColdKeys, c.Burst, c.Budget),
			"worst window admitted on the hot key, against its limit L (|):",
		},
		Header: []string{"mode", "instances", "limit", "requests", "worst_window_admitted", "early_refusals", "store_calls_per_s", "store_calls_per_decision", "bounds"},
	}
	t.Summary = append(t.Summary, r.textChart()...)
	for _, row := range r.Rows {
		bounds := "held"
		switch {
		case row.Mode == "local":
			bounds = "none (N x L)"
		case len(row.Broken) > 0:
			bounds = "BROKEN"
		}
		t.Rows = append(t.Rows, []string{row.Mode, strconv.Itoa(row.Instances), strconv.FormatInt(row.Limit, 10), strconv.Itoa(row.Requests),
			strconv.FormatInt(row.WorstWindow, 10), strconv.Itoa(row.EarlyRefusals), sim.Fixed(row.StoreCallsPerSecond(), 0),
			sim.Fixed(float64(row.StoreCalls)/float64(row.Requests), 4), bounds})
	}
	return t
}

// chartWidth is the characters of the text chart's bar at the limit.
const chartWidth = 30

// textChart draws each row's worst window as a bar, the limit at a
// fixed column.
func (r *Result) textChart() []string {
	var out []string
	for _, row := range r.Rows {
		n := int(float64(chartWidth) * float64(row.WorstWindow) / float64(row.Limit))
		bar := strings.Repeat("#", min(n, chartWidth))
		if n < chartWidth {
			bar += strings.Repeat(" ", chartWidth-n)
		}
		bar += "|"
		if n > chartWidth {
			bar += strings.Repeat("#", min(n-chartWidth, 2*chartWidth))
		}
		out = append(out, fmt.Sprintf("  %-6s %5d  %s %.2f L", row.Mode, row.Instances, bar, float64(row.WorstWindow)/float64(row.Limit)))
	}
	return out
}

// Charts draws the worst window against the limit, one bar per mode and
// fleet size, to path (.svg or .png).
func (r *Result) Charts(path string) ([]string, error) {
	var labels []string
	var values []float64
	for _, row := range r.Rows {
		labels = append(labels, fmt.Sprintf("%s %d", row.Mode, row.Instances))
		values = append(values, float64(row.WorstWindow)/float64(row.Limit))
	}
	if err := chart.Bars(path, "worst window admitted / limit", labels, values); err != nil {
		return nil, err
	}
	return []string{path}, nil
}
