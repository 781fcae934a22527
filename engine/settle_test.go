package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/memstore"
)

// adjustable is flaky with the memory store's Adjust, failing while down.
type adjustable struct{ *flaky }

func (a adjustable) Adjust(ctx context.Context, now time.Time, adj []portero.Adjustment) error {
	if a.down.Load() {
		return errDown
	}
	return a.Store.(portero.Adjuster).Adjust(ctx, now, adj)
}

func TestSettle(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close(ctx) })
	st := adjustable{&flaky{Store: mem}}
	budget := mustRule(t, "tokens", portero.FixedWindow, "1000/min", false)
	e := newEngine(t, st, engine.Options{})

	// A reservation of 600 tokens; the response says 100 were used.
	v := decide(t, e, 0, engine.Hit{Rule: budget, Key: "k", Cost: 600})
	if !v.Allowed || v.Results[0].Decision.Remaining != 400 {
		t.Fatalf("reservation: %+v", v.Results[0])
	}
	if err := e.Settle(ctx, t0.Add(time.Second), []engine.Adjustment{{Rule: budget, Key: "k", Delta: 100 - 600, At: t0}}); err != nil {
		t.Fatal(err)
	}
	if got := left(t, st, time.Second, engine.Hit{Rule: budget, Key: "k"}); got[0] != 900 {
		t.Errorf("after a refund of 500: %d left, want 900", got[0])
	}
	// The next reports 1,500: 900 left, 1,500 − 100 reserved charged.
	decide(t, e, 2*time.Second, engine.Hit{Rule: budget, Key: "k", Cost: 100})
	if err := e.Settle(ctx, t0.Add(3*time.Second), []engine.Adjustment{{Rule: budget, Key: "k", Delta: 1400, At: t0.Add(2 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	if v := decide(t, e, 4*time.Second, engine.Hit{Rule: budget, Key: "k", Cost: 1}); v.Allowed {
		t.Errorf("after overspending, a request was admitted: %+v", v.Results[0])
	}

	// The store fails: allow drops the settlement and says so; local
	// settles in the engine's memory.
	st.down.Store(true)
	err = e.Settle(ctx, t0, []engine.Adjustment{{Rule: budget, Key: "k", Delta: 1, At: t0}})
	if !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Errorf("Settle with the store down under allow = %v, want ErrStoreUnavailable", err)
	}
	local := newEngine(t, st, engine.Options{OnError: portero.FailLocal})
	if err := local.Settle(ctx, t0, []engine.Adjustment{{Rule: budget, Key: "j", Delta: 1000, At: t0}}); err != nil {
		t.Errorf("Settle under local = %v", err)
	}
	if v := decide(t, local, time.Second, engine.Hit{Rule: budget, Key: "j", Cost: 1}); v.Allowed || v.Results[0].Failure != portero.FailLocal {
		t.Errorf("after a local charge of the whole budget: %+v, want refused by the local memory", v.Results[0])
	}
	st.down.Store(false)

	// What cannot be adjusted says so; a store without Adjust too.
	q := mustRule(t, "queue", portero.LeakyQueue, "10/s", false)
	if err := e.Settle(ctx, t0, []engine.Adjustment{{Rule: q, Key: "k", Delta: 1}}); !errors.Is(err, portero.ErrNotAdjustable) {
		t.Errorf("Settle on a queue = %v, want ErrNotAdjustable", err)
	}
	plain := newEngine(t, &flaky{Store: mem}, engine.Options{})
	if err := plain.Settle(ctx, t0, []engine.Adjustment{{Rule: budget, Key: "k", Delta: 1}}); !errors.Is(err, portero.ErrNotAdjustable) {
		t.Errorf("Settle on a store without Adjust = %v, want ErrNotAdjustable", err)
	}
	if err := e.Settle(ctx, t0, []engine.Adjustment{{Key: "k", Delta: 1}}); !errors.Is(err, engine.ErrInvalidHit) {
		t.Errorf("Settle without a rule = %v, want ErrInvalidHit", err)
	}
}

func TestPeekCountsNothing(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close(ctx) })
	r := mustRule(t, "r", portero.FixedWindow, "3/min", false)
	e := newEngine(t, mem, engine.Options{})
	decide(t, e, 0, engine.Hit{Rule: r, Key: "k", Cost: 2})
	var v engine.Verdict
	for range 5 {
		if err := e.Peek(ctx, t0, []engine.Hit{{Rule: r, Key: "k", Cost: 1}}, &v); err != nil {
			t.Fatal(err)
		}
	}
	if d := v.Results[0].Decision; !v.Allowed || d.Remaining != 1 || v.Results[0].Outcome != engine.CheckOnly {
		t.Errorf("Peek = %+v, %v; want 1 left, check-only", d, v.Results[0].Outcome)
	}
}

// TestMaxDelayRefusesInTheDecision: a queue hit whose departure would come
// after its MaxDelay refuses the request in the store's decision, and the
// stacked rule counts nothing; refused by a check-only hit, the same hit is
// only looked at and still reported as refused by its bound.
func TestMaxDelayRefusesInTheDecision(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close(ctx) })
	queue := mustRule(t, "queue", portero.LeakyQueue, "2/s", false)
	log := mustRule(t, "log", portero.SlidingLog, "100/min", false)
	e := newEngine(t, mem, engine.Options{})
	hits := []engine.Hit{{Rule: log, Key: "k", Cost: 1}, {Rule: queue, Key: "k", Cost: 1, MaxDelay: 600 * time.Millisecond}}
	if v := decide(t, e, 0, hits...); !v.Allowed || v.Results[1].Decision.Delay != 500*time.Millisecond {
		t.Fatalf("first: %+v, want admitted with a 0.5 s delay", v.Results)
	}
	v := decide(t, e, 0, hits...)
	if res := v.Results[1]; v.Allowed || res.Outcome != engine.Refused || res.Decision.RetryAfter != 400*time.Millisecond || v.Results[0].Outcome != engine.NotCounted {
		t.Errorf("second, departing at 1.0 s: %+v, want refused by the queue (retry in 0.4 s) and the log not counted", v.Results)
	}
	if d, _ := mem.Peek(ctx, log.Rule, "k", t0, 1); d.Remaining != 99 {
		t.Errorf("the log has %d left, want 99: a refused request counts in no rule", d.Remaining)
	}
	spent := mustRule(t, "spent", portero.FixedWindow, "1/min", false)
	decide(t, e, 0, engine.Hit{Rule: spent, Key: "k", Cost: 1})
	v = decide(t, e, 0, engine.Hit{Rule: spent, Key: "k", Cost: 1, CheckOnly: true}, hits[1])
	if res := v.Results[1]; res.Outcome != engine.Refused || len(v.Violated) != 2 {
		t.Errorf("refused by a check-only hit: the queue hit is %v (violated %v), want refused by its bound too", res.Outcome, v.Violated)
	}
}

// TestRefundsGiveBack: the refunds of an admitted verdict give back every
// hit the store counted and can refund, and Settle applies them.
func TestRefundsGiveBack(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close(ctx) })
	window := mustRule(t, "window", portero.FixedWindow, "10/min", false)
	log := mustRule(t, "log", portero.SlidingLog, "10/min", false)
	e := newEngine(t, mem, engine.Options{})
	v := decide(t, e, 0, engine.Hit{Rule: window, Key: "k", Cost: 3}, engine.Hit{Rule: log, Key: "k", Cost: 1})
	adj := v.Refunds(t0, nil)
	if len(adj) != 1 || adj[0].Rule != window || adj[0].Delta != -3 {
		t.Fatalf("Refunds = %+v, want the window's 3 units (a sliding log cannot refund)", adj)
	}
	if err := e.Settle(ctx, t0, adj); err != nil {
		t.Fatal(err)
	}
	if d, _ := mem.Peek(ctx, window.Rule, "k", t0, 1); d.Remaining != 10 {
		t.Errorf("the window has %d left after the refund, want 10", d.Remaining)
	}
}

// TestPeekIsALook: a look at a spent rule is refused, and marked as a
// look, so that the header writer tells every rule's state.
func TestPeekIsALook(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close(ctx) })
	r := mustRule(t, "r", portero.FixedWindow, "1/min", false)
	e := newEngine(t, mem, engine.Options{})
	decide(t, e, 0, engine.Hit{Rule: r, Key: "k", Cost: 1})
	var v engine.Verdict
	if err := e.Peek(ctx, t0, []engine.Hit{{Rule: r, Key: "k", Cost: 1}}, &v); err != nil {
		t.Fatal(err)
	}
	if v.Allowed || !v.Look {
		t.Errorf("Peek of a spent rule: Allowed %v, Look %v; want a refused look", v.Allowed, v.Look)
	}
	if err := e.Decide(ctx, t0, []engine.Hit{{Rule: r, Key: "k", Cost: 1}}, &v); err != nil || v.Look {
		t.Errorf("Decide after Peek: Look %v, %v; want a decision", v.Look, err)
	}
}
