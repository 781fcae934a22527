package overload

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Queue says how requests that a concurrency limit refuses wait for a slot
// of their key, rather than being refused at once: a bounded queue with a
// deadline per request, in either drop order. Where a Gate's queue
// waits for the whole service, a Queue waits for one key of one rule (one
// client's, one tenant's, one route's share of slots).
type Queue struct {
	// Size is how many requests may wait per key, at least 1.
	Size int
	// Timeout is the longest a request waits, more than zero; a request
	// whose own deadline (its context's) comes first leaves then.
	Timeout time.Duration
	// Order is FIFO (wine, the default: a free slot goes to the oldest
	// waiter and a full queue refuses the newcomer) or LIFO (milk: a free
	// slot goes to the newest and a full queue drops its oldest waiter).
	Order Order
}

// Validate reports a Queue that cannot hold anyone.
func (q Queue) Validate() error {
	switch {
	case q.Size < 1:
		return fmt.Errorf("queue: size %d: want at least 1", q.Size)
	case q.Timeout <= 0:
		return fmt.Errorf("queue: timeout %v: want more than zero", q.Timeout)
	case q.Order != FIFO && q.Order != LIFO:
		return fmt.Errorf("queue: unknown %v", q.Order)
	}
	return nil
}

// Waitlist holds, per key, the requests waiting for a slot of a
// concurrency limit. The slots themselves are elsewhere (leases in a
// store, possibly shared by several instances): a Waitlist only orders and
// bounds the waiting. A request that finds no slot joins its key's line;
// whoever gives a slot back signals the line (Signal), which wakes the
// first waiter in the line's order to try again; a waiter also tries again
// every poll interval, for slots given back by other instances, which no
// signal reaches. A waiter keeps its place until it leaves (it got its
// slot, or gave up), is pushed out of a full LIFO line, or its deadline
// comes.
//
// A Waitlist is safe for concurrent use, and may outlive configuration
// changes: each waiter keeps the Queue it joined with. Memory follows the
// requests waiting: a key's line goes when its last waiter leaves.
type Waitlist struct {
	mu      sync.Mutex
	lines   map[string]*list[Waiter] // each key's line, oldest first
	waiting atomic.Int64             // waiters in every line, read without mu by Idle
}

// Waiter is one request's place in a Waitlist.
type Waiter struct {
	wl       *Waitlist
	key      string
	deadline time.Time
	order    Order
	inLine   link[Waiter]  // its place in its line
	in       bool          // still in its line
	signal   chan struct{} // one pending wake-up at most
	evicted  chan struct{} // closed when a full LIFO line drops it
}

// ErrQueueFull is Join's error when a FIFO line is full: the newcomer is
// refused. Wait returns ErrEvicted when a full LIFO line drops the waiter
// to make room for a newer one, and ErrQueueTimeout once its deadline has
// come.
var (
	ErrQueueFull    = fmt.Errorf("overload: the queue for a slot is full")
	ErrEvicted      = fmt.Errorf("overload: pushed out of the queue for a slot by newer requests")
	ErrQueueTimeout = fmt.Errorf("overload: waited for a slot until the deadline")
)

// NewWaitlist returns an empty Waitlist.
func NewWaitlist() *Waitlist { return &Waitlist{lines: map[string]*list[Waiter]{}} }

// Join puts a request at the back of key's line under q, to wait at most
// until deadline (or q.Timeout after now, whichever is earlier). A full
// FIFO line refuses it with ErrQueueFull; a full LIFO line drops its oldest
// waiter (whose Wait returns ErrEvicted) to make room.
func (wl *Waitlist) Join(key string, q Queue, now, deadline time.Time) (*Waiter, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if end := now.Add(q.Timeout); deadline.IsZero() || end.Before(deadline) {
		deadline = end
	}
	wl.mu.Lock()
	defer wl.mu.Unlock()
	ln := wl.lines[key]
	if ln == nil {
		ln = &list[Waiter]{}
		wl.lines[key] = ln
	}
	passed := false
	if ln.n >= q.Size {
		if q.Order == FIFO {
			return nil, ErrQueueFull
		}
		for ln.n >= q.Size { // milk: the oldest go
			old := ln.front()
			wl.unlink(ln, old)
			close(old.evicted)
			select {
			case <-old.signal: // its wake-up is the newcomer's
				passed = true
			default:
			}
		}
		if ln.n == 0 {
			wl.lines[key] = ln // unlink dropped the emptied line
		}
	}
	w := &Waiter{wl: wl, key: key, deadline: deadline, signal: make(chan struct{}, 1), evicted: make(chan struct{})}
	// The line keeps arrival order; LIFO is read from the back.
	ln.push(&w.inLine, w)
	w.in = true
	wl.waiting.Add(1)
	w.order = q.Order
	if passed {
		w.signal <- struct{}{}
	}
	return w, nil
}

// Signal tells key's line that a slot may be free: the first waiter in its
// order (the oldest under FIFO, the newest under LIFO) that has no wake-up
// pending gets one. A line whose waiters all have one, or no line, is left
// alone.
func (wl *Waitlist) Signal(key string) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	ln := wl.lines[key]
	if ln == nil {
		return
	}
	// The waiters of one line may have joined under different orders (a
	// reload changed it): the newest waiter's order decides.
	if ln.back().order == LIFO {
		for l := ln.tail; l != nil; l = l.prev {
			if nudge(l.v) {
				return
			}
		}
		return
	}
	for l := ln.head; l != nil; l = l.next {
		if nudge(l.v) {
			return
		}
	}
}

func nudge(w *Waiter) bool {
	select {
	case w.signal <- struct{}{}:
		return true
	default:
		return false
	}
}

// Idle reports whether no request waits in any line: whoever gives slots
// back may skip Signal (and building its key) then.
func (wl *Waitlist) Idle() bool { return wl.waiting.Load() == 0 }

// Len returns how many requests wait, in every line.
func (wl *Waitlist) Len() int { return int(wl.waiting.Load()) }

// Waiting returns how many requests wait in key's line.
func (wl *Waitlist) Waiting(key string) int {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	if ln := wl.lines[key]; ln != nil {
		return ln.n
	}
	return 0
}

// Wait blocks until the waiter should try for its slot again: it was
// signalled, or poll passed (poll ≤ 0: only signals), and then returns nil
// with the waiter still in its place. It returns ErrEvicted when a full
// LIFO line dropped it, ErrQueueTimeout when its deadline has come, and
// ctx's error when ctx ends first; after an error the waiter has left its
// line.
func (w *Waiter) Wait(ctx context.Context, poll time.Duration) error {
	left := time.Until(w.deadline)
	if left <= 0 {
		w.Leave()
		return ErrQueueTimeout
	}
	deadline := time.NewTimer(left)
	defer deadline.Stop()
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTimer(poll)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-w.signal:
		return nil
	case <-tick:
		return nil
	case <-w.evicted:
		return ErrEvicted
	case <-deadline.C:
		w.Leave()
		return ErrQueueTimeout
	case <-ctx.Done():
		w.Leave()
		return ctx.Err()
	}
}

// Deadline returns when the waiter stops waiting.
func (w *Waiter) Deadline() time.Time { return w.deadline }

// Leave takes the waiter out of its line: it got its slot, or gave up. A
// wake-up it had not used goes to the next waiter. Leaving twice, or after
// being evicted, does nothing.
func (w *Waiter) Leave() {
	wl := w.wl
	wl.mu.Lock()
	if !w.in {
		wl.mu.Unlock()
		return
	}
	ln := wl.lines[w.key]
	wl.unlink(ln, w)
	pending := false
	select {
	case <-w.signal:
		pending = true
	default:
	}
	wl.mu.Unlock()
	if pending {
		wl.Signal(w.key)
	}
}

// unlink takes w out of ln; wl.mu is held.
func (wl *Waitlist) unlink(ln *list[Waiter], w *Waiter) {
	ln.remove(&w.inLine)
	w.in = false
	wl.waiting.Add(-1)
	if ln.n == 0 {
		delete(wl.lines, w.key)
	}
}
