package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/config"
)

// TestBudget: a rule's budget reaches the store rule; on an algorithm that
// cannot lease, a concurrency limit or out of range, it is an error at its
// line naming what would do, all of them at once.
func TestBudget(t *testing.T) {
	const routes = "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n"
	c, err := config.Parse("ok.yaml", []byte(routes+"rules:\n  - {name: api, key: global, algorithm: gcra, limit: 50000/s, budget: 50ms}\n  - {name: day, key: tenant, limit: 200000/day, budget: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if b := c.Policy.Rule("api").StoreRule().Budget; b != 50*time.Millisecond {
		t.Errorf("api's store rule budget = %v, want 50ms", b)
	}
	if b := c.Policy.Rule("day").StoreRule().Budget; b != time.Second {
		t.Errorf("the quota's store rule budget = %v, want 1s", b)
	}
	src := routes + `rules:
  - {name: a, key: ip, limit: 10/s, budget: 50ms}
  - {name: b, key: ip, algorithm: sliding-log, limit: 10/s, budget: 50ms}
  - {name: c, key: ip, concurrency: {max: 3}, budget: 50ms}
  - {name: d, key: ip, algorithm: gcra, limit: 10/s, budget: 2m}
  - {name: e, key: ip, algorithm: gcra, limit: 10/s, budget: soon}
`
	_, err = config.Parse("bad.yaml", []byte(src))
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v, want Errors", err)
	}
	want := []string{
		`bad.yaml:4:45: rules[0].budget: sliding-counter cannot lease budgets; set algorithm to fixed-window, fixed-window-anchored, token-bucket, leaky-meter or gcra (or a calendar quota)`,
		`bad.yaml:5:69: rules[1].budget: sliding-log cannot lease budgets; set algorithm to fixed-window, fixed-window-anchored, token-bucket, leaky-meter or gcra (or a calendar quota)`,
		`bad.yaml:6:55: rules[2].budget: a concurrency limit takes no budget: its leases are its own`,
		`bad.yaml:7:62: rules[3].budget: 2m0s: want the time a batch lasts, from 1ms to 1m0s (50ms is a good start)`,
		`bad.yaml:8:62: rules[4].budget: "soon": want a duration such as 5s or 1m30s`,
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}
