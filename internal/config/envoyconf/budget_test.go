package envoyconf

import (
	"strings"
	"testing"
	"time"
)

// TestExtensionBudget: rate_limit.portero.budget reaches the rule the
// engine decides; on an algorithm that cannot lease, out of range, not a
// duration or in the compatibility mode it is an error at its line and
// column, all of them at once.
func TestExtensionBudget(t *testing.T) {
	const good = `domain: d
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 500, portero: {algorithm: gcra, budget: 50ms}}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 9000, portero: {calendar: true, budget: 1s}}
`
	c, err := Parse([]Source{{Name: "ok.yaml", Data: []byte(good)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]time.Duration{"api": 50 * time.Millisecond, "day": time.Second} {
		l := c.Domain("d").Match(entries(key, "v")).Limit
		if l == nil || l.Rule.Budget != want {
			t.Errorf("%s: limit %+v, want a rule with budget %v", key, l, want)
		}
	}
	const bad = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 5, portero: {budget: 50ms, algorithm: sliding-counter}}
  - key: b
    rate_limit: {requests_per_unit: 50, portero: {look_back: 60s, budget: 50ms}}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 5, portero: {budget: 2m}}
  - key: d
    rate_limit: {unit: second, requests_per_unit: 5, portero: {budget: soon}}
`
	_, err = Parse([]Source{{Name: "x.yaml", Data: []byte(bad)}}, Options{})
	want := []string{
		`x.yaml:4:72: descriptors[0].rate_limit.portero.budget: sliding-counter cannot lease budgets; set portero.algorithm to fixed-window, fixed-window-anchored, token-bucket, leaky-meter or gcra (or calendar: true)`,
		`x.yaml:6:75: descriptors[1].rate_limit.portero.budget: sliding-log cannot lease budgets; set portero.algorithm to fixed-window, fixed-window-anchored, token-bucket, leaky-meter or gcra (or calendar: true)`,
		`x.yaml:8:72: descriptors[2].rate_limit.portero.budget: 2m0s: want the time a batch lasts, from 1ms to 1m0s (50ms is a good start)`,
		`x.yaml:10:72: descriptors[3].rate_limit.portero.budget: "soon": want a duration such as 50ms`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	_, err = Parse([]Source{{Name: "ok.yaml", Data: []byte(good)}}, Options{Envoyproxy: true})
	if err == nil || !strings.Contains(err.Error(), "ok.yaml:4:91: descriptors[0].rate_limit.portero.budget: leased budgets are Portero's own") {
		t.Errorf("compatibility mode: %v, want the budget refused at its place", err)
	}
}
