package sim

import (
	"container/heap"
	"time"
)

// Events is the event queue of an experiment on a virtual clock: events
// come out by time, and events at the same time in the order they were
// pushed, so that every run processes them in the same order.
type Events[E any] struct {
	h   eventHeap[E]
	seq uint64
}

type event[E any] struct {
	at  time.Duration
	seq uint64
	e   E
}

// Push schedules e at trace time at.
func (q *Events[E]) Push(at time.Duration, e E) {
	q.seq++
	heap.Push(&q.h, event[E]{at: at, seq: q.seq, e: e})
}

// Pop removes and returns the earliest event; the queue must not be empty.
func (q *Events[E]) Pop() (time.Duration, E) {
	ev := heap.Pop(&q.h).(event[E])
	return ev.at, ev.e
}

// Len is the number of events queued.
func (q *Events[E]) Len() int { return len(q.h) }

// Next is the time of the earliest event; the queue must not be empty.
func (q *Events[E]) Next() time.Duration { return q.h[0].at }

type eventHeap[E any] []event[E]

func (h eventHeap[E]) Len() int { return len(h) }
func (h eventHeap[E]) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h eventHeap[E]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap[E]) Push(x any)   { *h = append(*h, x.(event[E])) }
func (h *eventHeap[E]) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
