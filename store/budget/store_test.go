package budget_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/budget"
)

// TestAllOrNothing: a call whose other hit refuses spends nothing of the
// batch, and a call whose leased hit refuses counts nothing elsewhere.
func TestAllOrNothing(t *testing.T) {
	sh := shared(t)
	s := instance(t, sh)
	leased := portero.Rule{Name: "g", Algorithm: portero.FixedWindow, Limit: portero.PerMinute(100), Budget: 50 * time.Millisecond}
	tight := portero.Rule{Name: "t", Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1)}
	hit := func(r portero.Rule, key string, cost int64) portero.Hit {
		return portero.Hit{Rule: r, Key: key, Cost: cost}
	}
	call := func(hits ...portero.Hit) []portero.Decision {
		t.Helper()
		d, err := s.AllowAll(ctx, base, hits)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for range 4 { // grow the batch: takes of 1, 2, 4, 8
		call(hit(leased, "g", 1))
	}
	call(hit(tight, "a", 1)) // a's one unit spent
	d := call(hit(leased, "g", 3), hit(tight, "a", 1))
	if !d[0].Allowed || d[1].Allowed {
		t.Fatalf("leased and spent tight = %+v, want the leased hit to pass alone and the tight one refused", d)
	}
	before, _ := s.Peek(ctx, leased, "g", base, 1)
	if d := call(hit(leased, "g", 1)); !d[0].Allowed || d[0].Remaining != before.Remaining-1 {
		t.Errorf("after a refused call, the next hit = %+v; want the batch untouched (%d left before it)", d[0], before.Remaining)
	}
	// The leased rule spent whole: a call with a fresh tight key is refused
	// and that key keeps its unit.
	for {
		if d := call(hit(leased, "g", 1)); !d[0].Allowed {
			break
		}
	}
	d = call(hit(leased, "g", 1), hit(tight, "b", 1))
	if d[0].Allowed || !d[1].Allowed {
		t.Fatalf("spent leased and fresh tight = %+v, want the leased refused, the tight passing alone", d)
	}
	if d := call(hit(tight, "b", 1)); !d[0].Allowed {
		t.Errorf("b was counted by a refused call: %+v", d[0])
	}
}

// gate is a shared store whose takes are counted, to find how many run at
// once on one key, and can be made to fail.
type gate struct {
	noClose
	inFlight, most, takes atomic.Int64
	fail                  atomic.Bool
}

func (g *gate) Take(ctx context.Context, now time.Time, r portero.Rule, key string, need, want int64) (int64, portero.Decision, error) {
	if g.fail.Load() {
		return 0, portero.Decision{}, portero.ErrStoreUnavailable
	}
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for {
		m := g.most.Load()
		if n <= m || g.most.CompareAndSwap(m, n) {
			break
		}
	}
	g.takes.Add(1)
	time.Sleep(100 * time.Microsecond) // let the other goroutines pile up
	return g.noClose.Take(ctx, now, r, key, need, want)
}

func (g *gate) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	if g.fail.Load() {
		return nil, portero.ErrStoreUnavailable
	}
	return g.noClose.AllowAll(ctx, now, hits)
}

// TestConcurrentOneTakeInFlight: 16 goroutines deciding one key at once
// on one instance run at most one take at a time, and the instance admits
// exactly the limit (nothing is left in its batch or in the shared state
// when it refuses); the takes stay few (batches grow with the rate).
func TestConcurrentOneTakeInFlight(t *testing.T) {
	g := &gate{noClose: noClose{shared(t)}}
	s, err := budget.New(g, budget.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	rule := portero.Rule{Name: "g", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 20000, Window: time.Hour}, Budget: 50 * time.Millisecond}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 2000 {
				d, err := s.AllowAll(ctx, base.Add(time.Minute), []portero.Hit{{Rule: rule, Key: "k", Cost: 1}})
				if err != nil {
					t.Error(err)
					return
				}
				if d[0].Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 20000 {
		t.Errorf("admitted %d of 32,000 on a limit of 20,000, want exactly the limit", n)
	}
	if m := g.most.Load(); m != 1 {
		t.Errorf("%d takes of one key in flight at once, want 1", m)
	}
	if n := g.takes.Load(); n > 200 {
		t.Errorf("%d takes for 32,000 decisions: batches did not grow", n)
	}
	t.Logf("%d takes for 32,000 decisions", g.takes.Load())
}

// TestSizesFollowTheRate: one instance at a steady 10,000 hits a second
// on a limit far above it takes about one batch per Budget interval (50
// ms: 20 a second), each about 500 units; and as the shared state runs
// low the batches shrink to one unit, so the limit is spent exactly.
func TestSizesFollowTheRate(t *testing.T) {
	sh := shared(t)
	s := instance(t, sh)
	rule := portero.Rule{Name: "g", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 50000, Window: time.Hour}, Budget: 50 * time.Millisecond}
	admitted := 0
	var calls1s uint64
	for i := range 60000 { // 6 s at 10,000/s: the limit runs out at 5 s
		now := base.Add(time.Duration(i) * 100 * time.Microsecond)
		if i == 10000 {
			calls1s = s.Stats().Calls
		}
		if i == 20000 {
			if n := s.Stats().Calls - calls1s; n < 15 || n > 30 {
				t.Errorf("%d takes in the second second at 10,000/s with batches of 50 ms, want about 20", n)
			}
		}
		d, err := s.AllowAll(ctx, now, []portero.Hit{{Rule: rule, Key: "k", Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if d[0].Allowed {
			admitted++
		}
	}
	if admitted != 50000 {
		t.Errorf("admitted %d, want the limit of 50,000 exactly", admitted)
	}
	st := s.Stats()
	if per := float64(st.Calls) / 60000; per > 0.01 {
		t.Errorf("%d store calls for 60,000 decisions: %.4f a decision, want at most 1/100", st.Calls, per)
	}
	t.Logf("%+v", st)
}

// TestGiveBack: what a window's batch holds goes back to the shared state
// when the batch has been idle for its lifetime, and at Close; a bucket's
// ends unspent and is counted as expired.
func TestGiveBack(t *testing.T) {
	sh := shared(t)
	fw := portero.Rule{Name: "fw", Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1000), Budget: 50 * time.Millisecond}
	tb := portero.Rule{Name: "tb", Algorithm: portero.TokenBucket, Limit: portero.PerMinute(1000), Budget: 50 * time.Millisecond}
	left := func(r portero.Rule) int64 {
		d, err := sh.Peek(ctx, r, "k", base, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	for _, r := range []portero.Rule{fw, tb} {
		s := instance(t, sh)
		for range 16 { // takes of 1, 2, 4, 8, 16: 15 units kept
			if _, err := s.AllowAll(ctx, base, []portero.Hit{{Rule: r, Key: "k", Cost: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		held := 1000 - 16 - left(r)
		if held <= 0 {
			t.Fatalf("%s: nothing held after the burst", r.Name)
		}
		if err := s.Sweep(ctx, base.Add(r.BudgetLifetime()-1)); err != nil || left(r) != 1000-16-held {
			t.Fatalf("%s: swept before the lifetime: %v, %d left", r.Name, err, left(r))
		}
		if err := s.Sweep(ctx, base.Add(r.BudgetLifetime())); err != nil {
			t.Fatal(err)
		}
		st := s.Stats()
		switch r.Algorithm {
		case portero.FixedWindow:
			if left(r) != 1000-16 || st.Returned != uint64(held) {
				t.Errorf("window: %d left in the shared state, %d returned; want %d, %d", left(r), st.Returned, 1000-16, held)
			}
		default:
			if st.Expired != uint64(held) || st.Returned != 0 {
				t.Errorf("bucket: %d expired, %d returned; want %d, 0", st.Expired, st.Returned, held)
			}
		}
	}
	// Close gives a window's batch back at once.
	s, err := budget.New(noClose{sh}, budget.Config{SweepInterval: -1, Now: func() time.Time { return base.Add(2 * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	before := left(fw)
	for range 16 {
		s.AllowAll(ctx, base.Add(time.Second), []portero.Hit{{Rule: fw, Key: "k", Cost: 1}})
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := left(fw); got != before-16 {
		t.Errorf("after Close %d left, want %d (all but the 16 spent)", got, before-16)
	}
}

// TestSharedStoreDown: units taken are spent while the shared store is
// down; a hit the batch cannot cover gets the store's error, for the
// failure policy.
func TestSharedStoreDown(t *testing.T) {
	g := &gate{noClose: noClose{shared(t)}}
	s, err := budget.New(g, budget.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	rule := portero.Rule{Name: "g", Algorithm: portero.GCRA, Limit: portero.PerSecond(1000), Budget: 50 * time.Millisecond}
	hit := []portero.Hit{{Rule: rule, Key: "k", Cost: 1}}
	for range 16 { // takes of 1, 2, 4, 8, 16: 15 kept
		s.AllowAll(ctx, base, hit)
	}
	g.fail.Store(true)
	admitted := 0
	for {
		d, err := s.AllowAll(ctx, base, hit)
		if err != nil {
			if !errors.Is(err, portero.ErrStoreUnavailable) {
				t.Fatalf("error %v, want ErrStoreUnavailable", err)
			}
			break
		}
		if !d[0].Allowed {
			t.Fatalf("refused from the batch: %+v", d[0])
		}
		admitted++
	}
	if admitted != 15 {
		t.Errorf("%d admitted from the batch with the store down, want the 15 it held", admitted)
	}
}
