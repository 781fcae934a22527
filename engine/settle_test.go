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
