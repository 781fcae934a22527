package portero_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
)

// script is a Limiter that answers a fixed list of decisions, one per call,
// and records when it was asked.
type script struct {
	ds    []portero.Decision
	asked []time.Duration
	start time.Time
	done  chan struct{}
}

func (s *script) AllowN(_ context.Context, _ string, now time.Time, _ int64) (portero.Decision, error) {
	s.asked = append(s.asked, now.Sub(s.start))
	d := s.ds[0]
	s.ds = s.ds[1:]
	return d, nil
}

type closing struct{ *script }

func (c closing) Done() <-chan struct{} { return c.done }

// TestWaitN: WaitN sleeps each refusal's RetryAfter and asks again, sleeps
// an admission's Delay (a queue's departure), refuses at once a wait past
// the deadline, ends with ctx or when the limiter's Done channel closes,
// and does not spin on a refusal that names no wait.
func TestWaitN(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := &script{start: time.Now(), ds: []portero.Decision{
			{RetryAfter: time.Second}, {RetryAfter: 500 * time.Millisecond}, {Allowed: true},
		}}
		if _, err := portero.WaitN(ctx, s, "k", 1, nil); err != nil {
			t.Fatal(err)
		}
		if got, want := s.asked, []time.Duration{0, time.Second, 1500 * time.Millisecond}; !slices.Equal(got, want) {
			t.Errorf("asked at %v, want %v", got, want)
		}

		s = &script{start: time.Now(), ds: []portero.Decision{{Allowed: true, Delay: 2 * time.Second}}}
		start := time.Now()
		if d, err := portero.WaitN(ctx, s, "k", 1, nil); err != nil || !d.Allowed || time.Since(start) != 2*time.Second {
			t.Errorf("queued: %+v, %v after %v; want admitted after the 2 s delay", d, err, time.Since(start))
		}

		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		s = &script{start: time.Now(), ds: []portero.Decision{{RetryAfter: 2 * time.Second}}}
		start = time.Now()
		if _, err := portero.WaitN(dctx, s, "k", 1, nil); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 0 {
			t.Errorf("past the deadline: %v after %v, want DeadlineExceeded at once", err, time.Since(start))
		}

		s = &script{start: time.Now(), ds: []portero.Decision{{}}}
		if _, err := portero.WaitN(ctx, s, "k", 1, nil); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("a refusal without a wait: %v, want ErrUnsupported", err)
		}

		s = &script{start: time.Now(), ds: []portero.Decision{{RetryAfter: time.Hour}}, done: make(chan struct{})}
		errc := make(chan error)
		go func() { _, err := portero.WaitN(ctx, closing{s}, "k", 1, nil); errc <- err }()
		synctest.Wait()
		close(s.done)
		if err := <-errc; !errors.Is(err, portero.ErrClosed) {
			t.Errorf("limiter closed during the wait: %v, want ErrClosed", err)
		}

		cctx, ccancel := context.WithCancel(ctx)
		s = &script{start: time.Now(), ds: []portero.Decision{{RetryAfter: time.Hour}}}
		go func() { _, err := portero.WaitN(cctx, s, "k", 1, nil); errc <- err }()
		synctest.Wait()
		ccancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled during the wait: %v, want Canceled", err)
		}
	})
}
