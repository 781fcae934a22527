package overload_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero/overload"
)

func mustGate(t *testing.T, cfg overload.Config) *overload.Gate {
	t.Helper()
	g, err := overload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// result is what one Acquire call returned, and after how long.
type result struct {
	tk    *overload.Ticket
	err   error
	after time.Duration
}

// acquire runs g.Acquire in a goroutine and delivers its result.
func acquire(ctx context.Context, g *overload.Gate, r overload.Request) <-chan result {
	ch := make(chan result, 1)
	start := time.Now()
	go func() {
		tk, err := g.Acquire(ctx, r)
		ch <- result{tk, err, time.Since(start)}
	}()
	return ch
}

func reason(err error) overload.Reason {
	var ref *overload.Refusal
	if errors.As(err, &ref) {
		return ref.Reason
	}
	return 0
}

// TestAcquireWaits: a queued caller blocks until a slot is released, then
// runs; the wait is exactly as long as the slot stayed taken.
func TestAcquireWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, overload.Config{MaxInFlight: 1, QueueSize: 1})
		a, err := g.Acquire(t.Context(), overload.Request{})
		if err != nil {
			t.Fatal(err)
		}
		b := acquire(t.Context(), g, overload.Request{})
		synctest.Wait()
		select {
		case r := <-b:
			t.Fatalf("b returned %v, %v while the slot was taken", r.tk, r.err)
		default:
		}
		if _, err := g.Acquire(t.Context(), overload.Request{}); reason(err) != overload.Full {
			t.Errorf("a third caller got %v, want a Full refusal", err)
		}
		time.Sleep(300 * time.Millisecond)
		g.Release(a)
		r := <-b
		if r.err != nil || r.tk.State() != overload.Running || r.after != 300*time.Millisecond {
			t.Fatalf("b = %v, %v after %v; want running after 300ms", r.tk, r.err, r.after)
		}
		g.Release(r.tk)
		g.Release(r.tk) // twice: nothing
		if s := g.Stats(); s.InFlight != 0 || s.Waiting != 0 || s.Finished != 2 {
			t.Errorf("Stats = %+v", s)
		}
	})
}

// TestAcquireDeadline: a waiter whose context ends in 300 ms, with a run
// time of 100 ms, is dropped at 200 ms — the moment it could no longer be
// answered in time — not when its context ends; one whose turn would come
// too late is refused at once.
func TestAcquireDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, overload.Config{MaxInFlight: 1, QueueSize: 5, ServiceTime: 100 * time.Millisecond, RetryAfter: 2 * time.Second})
		a, err := g.Acquire(t.Context(), overload.Request{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		b := acquire(ctx, g, overload.Request{})
		synctest.Wait()
		// c's turn would be after b's, at 200 ms, past its 150 ms.
		c := acquire(t.Context(), g, overload.Request{Deadline: time.Now().Add(250 * time.Millisecond)})
		rc := <-c
		var ref *overload.Refusal
		if !errors.As(rc.err, &ref) || ref.Reason != overload.Late || ref.RetryAfter != 2*time.Second || rc.after != 0 {
			t.Errorf("c = %v after %v, want a Late refusal with Retry-After 2s at once", rc.err, rc.after)
		}
		rb := <-b
		if reason(rb.err) != overload.Late || rb.after != 200*time.Millisecond {
			t.Errorf("b = %v after %v, want a Late refusal after 200ms", rb.err, rb.after)
		}
		g.Release(a)
		if s := g.Stats(); s.Refused[overload.Late] != 2 || s.Waiting != 0 {
			t.Errorf("Stats = %+v", s)
		}
	})
}

// TestAcquireCancel: a caller that gives up leaves the queue at once and
// gets its context's error.
func TestAcquireCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, overload.Config{MaxInFlight: 1, QueueSize: 5})
		a, _ := g.Acquire(t.Context(), overload.Request{})
		ctx, cancel := context.WithCancel(t.Context())
		b := acquire(ctx, g, overload.Request{})
		time.Sleep(time.Second)
		cancel()
		rb := <-b
		if !errors.Is(rb.err, context.Canceled) || rb.after != time.Second {
			t.Errorf("b = %v after %v, want context.Canceled after 1s", rb.err, rb.after)
		}
		if s := g.Stats(); s.Waiting != 0 || s.Canceled != 1 {
			t.Errorf("Stats = %+v", s)
		}
		if _, err := g.Acquire(ctx, overload.Request{}); !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire with a done context = %v", err)
		}
		g.Release(a)
	})
}

// TestAcquireOrders: three callers queue one after another; releases serve
// them oldest first under FIFO, newest first under LIFO, and a full LIFO
// queue pushes out its oldest caller.
func TestAcquireOrders(t *testing.T) {
	for _, tc := range []struct {
		order overload.Order
		want  string
	}{
		{overload.FIFO, "123"},
		{overload.LIFO, "432"}, // 1 was pushed out by 4
	} {
		t.Run(tc.order.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := mustGate(t, overload.Config{MaxInFlight: 1, QueueSize: 3, Order: tc.order})
				first, _ := g.Acquire(t.Context(), overload.Request{})
				var (
					mu    sync.Mutex
					order string
					wg    sync.WaitGroup
				)
				n := 3
				if tc.order == overload.LIFO {
					n = 4
				}
				for i := range n {
					wg.Go(func() {
						tk, err := g.Acquire(t.Context(), overload.Request{})
						if err != nil {
							if tc.order != overload.LIFO || i != 0 || reason(err) != overload.Evicted {
								t.Errorf("caller %d: %v", i+1, err)
							}
							return
						}
						mu.Lock()
						order += string(rune('1' + i))
						mu.Unlock()
						time.Sleep(time.Millisecond)
						g.Release(tk)
					})
					synctest.Wait() // each one queued before the next comes
				}
				g.Release(first)
				wg.Wait()
				if order != tc.want {
					t.Errorf("served %q, want %q", order, tc.want)
				}
			})
		})
	}
}
