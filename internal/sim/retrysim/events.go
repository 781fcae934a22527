package retrysim

import (
	"container/heap"
	"time"
)

// event is something that happens at a virtual time; seq keeps events at
// the same time in the order they were scheduled, so runs are reproducible.
type event struct {
	at      time.Duration
	seq     uint64
	req     int // request (or client) index
	attempt int // attempt number from 1; 0 for an arrival
}

type queue struct {
	items []event
	seq   uint64
}

func (q *queue) Len() int { return len(q.items) }
func (q *queue) Less(i, j int) bool {
	a, b := q.items[i], q.items[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}
func (q *queue) Swap(i, j int) { q.items[i], q.items[j] = q.items[j], q.items[i] }
func (q *queue) Push(x any)    { q.items = append(q.items, x.(event)) }
func (q *queue) Pop() any {
	e := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	return e
}

func (q *queue) schedule(at time.Duration, req, attempt int) {
	q.seq++
	heap.Push(q, event{at: at, seq: q.seq, req: req, attempt: attempt})
}

func (q *queue) next() event { return heap.Pop(q).(event) }
