package servemetrics

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/policy"
)

// TestFailurePolicyMetric: a rule decided by the failure policy
// (engine.Result.Failure) is counted in portero_failure_policy_decisions_total
// by rule; a rule decided by the store is not.
func TestFailurePolicyMetric(t *testing.T) {
	o := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	p, err := policy.New([]policy.Rule{
		{Name: "a", Key: policy.MustParseKey("ip"), Limit: portero.MustParseLimit("10/s")},
		{Name: "b", Key: policy.MustParseKey("ip"), Limit: portero.MustParseLimit("10/s")},
	}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o.SetPolicy(p)
	v := &engine.Verdict{Allowed: true, Results: []engine.Result{
		{Hit: engine.Hit{Rule: p.Rules()[0].Engine()}, Outcome: engine.Allowed, Decision: portero.Decision{Allowed: true}, Failure: portero.FailAllow},
		{Hit: engine.Hit{Rule: p.Rules()[1].Engine()}, Outcome: engine.Allowed, Decision: portero.Decision{Allowed: true}},
	}}
	for range 3 {
		o.OnDecision(httptest.NewRequest("GET", "/", nil), v, time.Microsecond)
	}
	if got := counterValue(t, o.failurePolicy.WithLabelValues("a")); got != 3 {
		t.Errorf("failure_policy_decisions{rule=a} = %v, want 3", got)
	}
	if got := counterValue(t, o.failurePolicy.WithLabelValues("b")); got != 0 {
		t.Errorf("failure_policy_decisions{rule=b} = %v, want 0", got)
	}
}
