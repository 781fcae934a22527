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

// hotObserver is an observer at the benchmark's log level (warn) with a
// policy of the benchmark's shape, and a verdict of that policy whose
// per-client rule ended with out.
func hotObserver(tb testing.TB, out engine.Outcome) (*Observer, *engine.Verdict) {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := New(Options{Logger: log})
	p, err := policy.New([]policy.Rule{
		{Name: "per-client", Key: policy.MustParseKey("ip"), Algorithm: portero.TokenBucket, Limit: portero.MustParseLimit("1/h")},
		{Name: "global", Key: policy.MustParseKey("global"), Algorithm: portero.SlidingCounter, Limit: portero.MustParseLimit("100000000/s")},
	}, policy.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	o.SetPolicy(p)
	return o, &engine.Verdict{Results: []engine.Result{
		{Hit: engine.Hit{Rule: p.Rules()[0].Engine(), Key: "ip=192.0.2.1/32"}, Outcome: out, Decision: portero.Decision{RetryAfter: time.Hour}},
		{Hit: engine.Hit{Rule: p.Rules()[1].Engine(), Key: "global"}, Outcome: engine.Allowed},
	}}
}

// TestObserverAllocatesNothing: counting a decision, passed or refused,
// allocates nothing at a level that drops the refusal's log line (its
// arguments cost five allocations per refusal when they were built anyway).
func TestObserverAllocatesNothing(t *testing.T) {
	r := httptest.NewRequest("GET", "/items/1", nil)
	for _, out := range []engine.Outcome{engine.Allowed, engine.Refused} {
		o, v := hotObserver(t, out)
		if n := testing.AllocsPerRun(100, func() { o.OnDecision(r, v, time.Microsecond) }); n != 0 {
			t.Errorf("onDecision of a %s request: %v allocations, want 0", out, n)
		}
	}
}

// BenchmarkOnDecision is what the observer (metrics, refused-keys list,
// logs) costs a request of scripts/bench-gateway.sh's policy, passed and
// refused, at the log level the benchmark runs portero with (warn).
func BenchmarkOnDecision(b *testing.B) {
	r := httptest.NewRequest("GET", "/items/1", nil)
	for _, bc := range []struct {
		name string
		out  engine.Outcome
	}{{"pass", engine.Allowed}, {"refuse", engine.Refused}} {
		o, v := hotObserver(b, bc.out)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				o.OnDecision(r, v, time.Microsecond)
			}
		})
	}
}
