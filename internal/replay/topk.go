package replay

import (
	"container/heap"
	"sort"
	"time"
)

// topKeys counts the keys refused most in bounded memory, with the
// Space-Saving algorithm (Metwally, Agrawal and El Abbadi, 2005): it keeps
// at most capacity counters; a key not kept takes the place of the one
// counted least, and inherits its count as its possible overcount (Error).
// Every key refused more than total/capacity times is kept, and a kept
// key's true count lies in [Count−Error, Count].
type topKeys struct {
	capacity int
	byKey    map[refusedKey]*keyCounter
	h        counterHeap
	total    int64
}

type refusedKey struct {
	rule int
	key  string
}

type keyCounter struct {
	refusedKey
	count, err  int64
	first, last time.Time
	index       int
}

func newTopKeys(capacity int) *topKeys {
	return &topKeys{capacity: capacity, byKey: make(map[refusedKey]*keyCounter, capacity)}
}

func (t *topKeys) add(rule int, key string, now time.Time) {
	t.total++
	k := refusedKey{rule, key}
	if c, ok := t.byKey[k]; ok {
		c.count++
		c.last = now
		heap.Fix(&t.h, c.index)
		return
	}
	if len(t.h) < t.capacity {
		c := &keyCounter{refusedKey: k, count: 1, first: now, last: now}
		t.byKey[k] = c
		heap.Push(&t.h, c)
		return
	}
	c := t.h[0] // the least counted: its place goes to the new key
	delete(t.byKey, c.refusedKey)
	c.refusedKey, c.err, c.first, c.last = k, c.count, now, now
	c.count++
	t.byKey[k] = c
	heap.Fix(&t.h, 0)
}

// top returns the n keys counted most, most first (then by rule, key).
func (t *topKeys) top(n int) []*keyCounter {
	out := make([]*keyCounter, len(t.h))
	copy(out, t.h)
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.count != b.count {
			return a.count > b.count
		}
		if a.rule != b.rule {
			return a.rule < b.rule
		}
		return a.key < b.key
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

type counterHeap []*keyCounter

func (h counterHeap) Len() int           { return len(h) }
func (h counterHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h counterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *counterHeap) Push(x any) {
	c := x.(*keyCounter)
	c.index = len(*h)
	*h = append(*h, c)
}
func (h *counterHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
