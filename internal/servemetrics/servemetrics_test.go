package servemetrics

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/policy"
)

// TestDecisionCounters checks that the counters looked up once per policy
// count the same series as the label lookup they replace, including for a
// verdict of a policy that a reload has replaced meanwhile.
func TestDecisionCounters(t *testing.T) {
	o := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	mk := func(names ...string) *policy.Policy {
		var rules []policy.Rule
		for _, n := range names {
			rules = append(rules, policy.Rule{Name: n, Key: policy.MustParseKey("ip"), Limit: portero.MustParseLimit("10/s")})
		}
		p, err := policy.New(rules, policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	old, cur := mk("a", "b"), mk("b", "c")
	o.SetPolicy(cur)
	r := httptest.NewRequest("GET", "/", nil)
	verdict := func(p *policy.Policy, outs ...engine.Outcome) *engine.Verdict {
		v := &engine.Verdict{}
		for i, out := range outs {
			v.Results = append(v.Results, engine.Result{Hit: engine.Hit{Rule: p.Rules()[i].Engine(), Key: "ip=192.0.2.1/32"}, Outcome: out})
		}
		return v
	}
	o.OnDecision(r, verdict(cur, engine.Allowed, engine.NearLimit), time.Microsecond)
	o.OnDecision(r, verdict(cur, engine.NotCounted, engine.Refused), time.Microsecond)
	o.OnDecision(r, verdict(old, engine.Allowed, engine.ShadowRefused), time.Microsecond) // in flight across a reload
	for _, tt := range []struct {
		rule    string
		outcome engine.Outcome
		want    float64
	}{
		{"b", engine.Allowed, 1}, {"b", engine.NotCounted, 1}, {"c", engine.NearLimit, 1}, {"c", engine.Refused, 1},
		{"a", engine.Allowed, 1}, {"b", engine.ShadowRefused, 1}, {"c", engine.Allowed, 0},
	} {
		if got := counterValue(t, o.decisions.WithLabelValues(tt.rule, tt.outcome.String())); got != tt.want {
			t.Errorf("decisions{rule=%s,outcome=%s} = %v, want %v", tt.rule, tt.outcome, got, tt.want)
		}
	}
	o.o.Degraded = func() bool { return true }
	o.OnDecision(r, verdict(cur, engine.Allowed), time.Microsecond)
	if !o.fallback.Load() {
		t.Error("fallback not set while the store is degraded")
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
