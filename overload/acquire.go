package overload

import (
	"context"
	"time"
)

// Acquire asks for a slot for r on the wall clock and waits for it if r is
// queued. It returns the Running ticket, to be given back with Release when
// the request ends however it ends (a deferred Release covers panics); a
// *Refusal when the Gate refuses r, at once or after waiting (evicted, or
// the moment it could no longer be answered in time); or ctx's error when
// ctx ends first, and then r holds no slot and no place.
//
// ctx's deadline, when earlier than r.Deadline, is r's deadline: the caller
// will not wait for the answer longer than that.
func (g *Gate) Acquire(ctx context.Context, r Request) (*Ticket, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok && (r.Deadline.IsZero() || dl.Before(r.Deadline)) {
		r.Deadline = dl
	}
	var buf [4]*Ticket
	g.mu.Lock()
	t, changed := g.arrive(time.Now(), r, buf[:0])
	// Read under the lock: once it is released a waiting t may be admitted
	// or dropped by another goroutine at any moment.
	st := t.state
	if st == Waiting {
		t.wake = make(chan struct{})
	}
	g.mu.Unlock()
	wake(changed)
	switch st {
	case Running:
		return t, nil
	case Refused:
		return nil, g.Refusal(t)
	}
	var timer *time.Timer
	var expired <-chan time.Time
	arm := func() {
		if t.dropAt.IsZero() {
			return
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(t.dropAt))
			expired = timer.C
		} else {
			timer.Reset(time.Until(t.dropAt))
		}
	}
	arm()
	if timer != nil {
		defer timer.Stop()
	}
	for {
		select {
		case <-t.wake:
			// The state was written under the lock before wake was closed.
			if t.state == Running {
				return t, nil
			}
			return nil, g.Refusal(t)
		case <-expired:
			g.mu.Lock()
			changed = g.expire(time.Now(), buf[:0])
			g.mu.Unlock()
			wake(changed) // t among them, normally
			arm()         // or wait for the rest of its time
		case <-ctx.Done():
			g.mu.Lock()
			was := t.state
			changed = g.cancel(time.Now(), t, buf[:0])
			g.mu.Unlock()
			wake(changed)
			if was == Refused {
				return nil, g.Refusal(t)
			}
			return nil, ctx.Err()
		}
	}
}

// Release gives back the slot of a ticket Acquire returned, at the wall
// clock's now, and wakes the waiters that get a slot. Releasing nil, or a
// ticket twice, does nothing.
func (g *Gate) Release(t *Ticket) {
	if t == nil {
		return
	}
	var buf [4]*Ticket
	g.mu.Lock()
	changed := g.done(time.Now(), t, true, buf[:0])
	g.mu.Unlock()
	wake(changed)
}

// wake tells the waiting Acquire calls among changed that their tickets left
// Waiting. Each ticket leaves Waiting once, so each channel is closed once.
func wake(changed []*Ticket) {
	for _, t := range changed {
		if t.wake != nil {
			close(t.wake)
		}
	}
}
