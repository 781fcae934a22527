package h2grpc

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// callCtx must behave as context.WithDeadline(parent, now+timeout) would,
// whether or not anybody asked for Done.
func TestCallCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c callCtx
		c.init(context.Background(), 10*time.Millisecond, true)
		if dl, ok := c.Deadline(); !ok || !dl.Equal(time.Now().Add(10*time.Millisecond)) {
			t.Fatalf("Deadline = %v, %v", dl, ok)
		}
		if err := c.Err(); err != nil {
			t.Fatalf("Err before the deadline = %v", err)
		}
		time.Sleep(10 * time.Millisecond)
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err at the deadline, no Done asked = %v", err)
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done not closed after the deadline")
		}

		// Done asked first: closed by the deadline's timer.
		var d callCtx
		d.init(context.Background(), time.Second, true)
		done := d.Done()
		time.Sleep(time.Second - time.Nanosecond)
		select {
		case <-done:
			t.Fatal("Done closed before the deadline")
		default:
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Done not closed at the deadline")
		}
		if err := d.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err = %v", err)
		}

		// Err never changes once set: past the deadline, a reset or the
		// connection ending leave it DeadlineExceeded, Done asked or not.
		for _, asked := range []bool{false, true} {
			conn, end := context.WithCancel(context.Background())
			defer end()
			var e callCtx
			e.init(conn, time.Millisecond, true)
			time.Sleep(time.Millisecond)
			if asked {
				if err := e.Err(); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Err past the deadline = %v", err)
				}
			}
			e.cancel()
			end()
			<-e.Done()
			if err := e.Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Err asked=%v after the deadline, a reset and the connection's end = %v", asked, err)
			}
		}
	})
}

func TestCallCtxCancel(t *testing.T) {
	// Cancelled before anybody asked: Err says so, Done is closed.
	var c callCtx
	c.init(context.Background(), 0, false)
	if _, ok := c.Deadline(); ok {
		t.Fatal("a call without grpc-timeout has a deadline")
	}
	c.cancel()
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after cancel = %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after cancel")
	}

	// A derived context attaches to it and is cancelled with it.
	var p callCtx
	p.init(context.Background(), time.Hour, true)
	child, stop := context.WithTimeout(&p, 2*time.Hour)
	defer stop()
	if dl, _ := child.Deadline(); !dl.Equal(p.deadline) {
		t.Fatalf("child deadline %v, want the call's %v", dl, p.deadline)
	}
	p.cancel()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("child not cancelled with the call")
	}

	// The connection ending cancels the call.
	conn, end := context.WithCancel(context.Background())
	var q callCtx
	q.init(conn, time.Hour, true)
	end()
	if err := q.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after the connection ended = %v", err)
	}
}
