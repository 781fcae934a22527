package overload_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero/overload"
)

// waitResult is what one Wait returned, and when.
type waitResult struct {
	name  string
	err   error
	after time.Duration
}

// waitOnce runs w.Wait in a goroutine and delivers its result on ch.
func waitOnce(ctx context.Context, name string, w *overload.Waiter, poll time.Duration, ch chan<- waitResult) {
	start := time.Now()
	go func() {
		err := w.Wait(ctx, poll)
		ch <- waitResult{name, err, time.Since(start)}
	}()
}

func join(t *testing.T, wl *overload.Waitlist, key string, q overload.Queue) *overload.Waiter {
	t.Helper()
	w, err := wl.Join(key, q, time.Now(), time.Time{})
	if err != nil {
		t.Fatalf("Join(%s) = %v", key, err)
	}
	return w
}

// A signal wakes the oldest waiter under FIFO (wine) and the newest under
// LIFO (milk); each signal wakes one waiter, and only of its own key.
func TestWaitlistOrder(t *testing.T) {
	for _, tc := range []struct {
		order overload.Order
		want  string
	}{{overload.FIFO, "abc"}, {overload.LIFO, "cba"}} {
		t.Run(tc.order.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				wl := overload.NewWaitlist()
				q := overload.Queue{Size: 3, Timeout: time.Minute, Order: tc.order}
				ch := make(chan waitResult, 4)
				waiters := map[string]*overload.Waiter{}
				for _, name := range []string{"a", "b", "c"} {
					waiters[name] = join(t, wl, "k", q)
					waitOnce(t.Context(), name, waiters[name], 0, ch)
				}
				other := join(t, wl, "other", q)
				waitOnce(t.Context(), "other", other, 0, ch)
				synctest.Wait()
				var got strings.Builder
				for range 3 {
					wl.Signal("k")
					synctest.Wait()
					select {
					case r := <-ch:
						if r.err != nil {
							t.Fatalf("%s: Wait = %v", r.name, r.err)
						}
						got.WriteString(r.name)
						waiters[r.name].Leave() // it got its slot
					default:
						t.Fatal("a signal woke nobody")
					}
				}
				if got.String() != tc.want {
					t.Errorf("woken in order %q, want %q", got.String(), tc.want)
				}
				select {
				case r := <-ch:
					t.Errorf("%s woke up by another key's signals", r.name)
				default:
				}
				other.Leave()
			})
		})
	}
}

// A full FIFO line refuses the newcomer; a full LIFO line pushes out its
// oldest waiter, whose Wait returns ErrEvicted at once.
func TestWaitlistFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wl := overload.NewWaitlist()
		wine := overload.Queue{Size: 2, Timeout: time.Minute}
		join(t, wl, "w", wine)
		join(t, wl, "w", wine)
		if _, err := wl.Join("w", wine, time.Now(), time.Time{}); !errors.Is(err, overload.ErrQueueFull) {
			t.Errorf("third in a full FIFO line of 2: %v, want ErrQueueFull", err)
		}
		if n := wl.Waiting("w"); n != 2 {
			t.Errorf("Waiting = %d, want 2", n)
		}

		milk := overload.Queue{Size: 2, Timeout: time.Minute, Order: overload.LIFO}
		ch := make(chan waitResult, 3)
		oldest := join(t, wl, "m", milk)
		waitOnce(t.Context(), "oldest", oldest, 0, ch)
		waitOnce(t.Context(), "middle", join(t, wl, "m", milk), 0, ch)
		synctest.Wait()
		newest := join(t, wl, "m", milk)
		synctest.Wait()
		select {
		case r := <-ch:
			if r.name != "oldest" || !errors.Is(r.err, overload.ErrEvicted) || r.after != 0 {
				t.Errorf("%s: %v after %v; want the oldest evicted at once", r.name, r.err, r.after)
			}
		default:
			t.Fatal("nobody was pushed out of the full LIFO line")
		}
		if n := wl.Waiting("m"); n != 2 {
			t.Errorf("Waiting = %d, want 2", n)
		}
		oldest.Leave() // harmless
		newest.Leave()
		if n := wl.Waiting("m"); n != 1 {
			t.Errorf("after Leave: Waiting = %d, want 1", n)
		}
	})
}

// A waiter leaves at its deadline — the earlier of the queue's timeout and
// its own — and not a moment later; one whose context ends leaves then;
// poll wakes it to try again, still in its place.
func TestWaitlistDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wl := overload.NewWaitlist()
		q := overload.Queue{Size: 4, Timeout: 2 * time.Second}
		ch := make(chan waitResult, 4)

		waitOnce(t.Context(), "timeout", join(t, wl, "k", q), 0, ch)
		own, err := wl.Join("k", q, time.Now(), time.Now().Add(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		waitOnce(t.Context(), "own deadline", own, 0, ch)
		ctx, cancel := context.WithCancel(t.Context())
		waitOnce(ctx, "canceled", join(t, wl, "k", q), 0, ch)
		poller := join(t, wl, "k", q)
		waitOnce(t.Context(), "poll", poller, 300*time.Millisecond, ch)

		time.Sleep(100 * time.Millisecond)
		cancel()
		want := []struct {
			name  string
			err   error
			after time.Duration
		}{
			{"canceled", context.Canceled, 100 * time.Millisecond},
			{"poll", nil, 300 * time.Millisecond},
			{"own deadline", overload.ErrQueueTimeout, 500 * time.Millisecond},
			{"timeout", overload.ErrQueueTimeout, 2 * time.Second},
		}
		again := make(chan waitResult, 1)
		for _, w := range want {
			r := <-ch
			if r.name != w.name || !errors.Is(r.err, w.err) || r.after != w.after {
				t.Errorf("%s: %v after %v; want %s: %v after %v", r.name, r.err, r.after, w.name, w.err, w.after)
			}
			if r.name == "poll" {
				if n := wl.Waiting("k"); n != 3 {
					t.Errorf("Waiting after the poll = %d, want 3 (the poller keeps its place)", n)
				}
				// Its second wait ends at its own deadline, 2 s after it
				// joined: polling did not move it.
				waitOnce(t.Context(), "poll again", poller, 0, again)
			}
		}
		if r := <-again; !errors.Is(r.err, overload.ErrQueueTimeout) || r.after != 1700*time.Millisecond {
			t.Errorf("the poller's second wait: %v after %v, want ErrQueueTimeout after 1.7 s", r.err, r.after)
		}
		if n := wl.Waiting("k"); n != 0 {
			t.Errorf("Waiting = %d, want 0: every waiter left", n)
		}
	})
}

// A waiter that leaves with a wake-up it did not use (it was woken while it
// tried on its own) hands the wake-up to the next waiter, so that a free
// slot is not missed.
func TestWaitlistLeavePassesSignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wl := overload.NewWaitlist()
		q := overload.Queue{Size: 2, Timeout: time.Minute}
		first := join(t, wl, "k", q)
		ch := make(chan waitResult, 1)
		waitOnce(t.Context(), "second", join(t, wl, "k", q), 0, ch)
		synctest.Wait()
		wl.Signal("k") // goes to first, which is not waiting
		first.Leave()
		synctest.Wait()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Errorf("second: %v", r.err)
			}
		default:
			t.Error("the wake-up the first waiter left with was lost")
		}
	})
}

func TestQueueValidate(t *testing.T) {
	for _, tc := range []struct {
		q    overload.Queue
		want string
	}{
		{overload.Queue{Size: 0, Timeout: time.Second}, "size 0"},
		{overload.Queue{Size: 1}, "timeout 0s"},
		{overload.Queue{Size: 1, Timeout: time.Second, Order: 7}, "unknown"},
	} {
		if err := tc.q.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error containing %q", tc.q, err, tc.want)
		}
	}
	if err := (overload.Queue{Size: 1, Timeout: time.Second, Order: overload.LIFO}).Validate(); err != nil {
		t.Errorf("a valid queue: %v", err)
	}
}
