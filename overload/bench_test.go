package overload

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkGateQueue drives a full Gate on a virtual clock: 4 slots, a
// queue of 64, 16 tenants; each iteration one request arrives (it waits,
// pushes a waiter out or is refused) and one running request ends (a
// waiter gets its slot). It measures the queue's bookkeeping.
func BenchmarkGateQueue(b *testing.B) {
	for _, tc := range []struct {
		name     string
		order    Order
		shedding Shedding
	}{{"fifo", FIFO, ByOrder}, {"lifo", LIFO, ByOrder}, {"fair", FIFO, Fair}, {"fair-lifo", LIFO, Fair}, {"random", FIFO, Random}} {
		b.Run(tc.name, func(b *testing.B) {
			g, err := New(Config{MaxInFlight: 4, QueueSize: 64, Order: tc.order, Shedding: tc.shedding,
				Rand: rand.New(rand.NewPCG(1, 2)), MaxWait: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Unix(0, 0)
			var running []*Ticket
			var changed []*Ticket
			tenants := make([]string, 16)
			for i := range tenants {
				tenants[i] = fmt.Sprint("t", i)
			}
			admit := func(ts []*Ticket) {
				for _, t := range ts {
					if t.State() == Running {
						running = append(running, t)
					}
				}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now = now.Add(time.Millisecond)
				var t *Ticket
				t, changed = g.Arrive(now, Request{Tenant: tenants[i%len(tenants)], Priority: Priority(i%3 - 1)}, changed[:0])
				admit(append(changed, t))
				if len(running) > 0 {
					done := running[0]
					running = running[1:]
					admit(g.Done(now, done, changed[:0]))
				}
			}
		})
	}
}

// BenchmarkWaitlist joins, signals and leaves a line of 8 waiters per key
// over 16 keys, as the waiting for a concurrency rule's slot does.
func BenchmarkWaitlist(b *testing.B) {
	for _, order := range []Order{FIFO, LIFO} {
		b.Run(order.String(), func(b *testing.B) {
			wl := NewWaitlist()
			q := Queue{Size: 8, Timeout: time.Hour, Order: order}
			now := time.Unix(0, 0)
			keys := make([]string, 16)
			lines := make([][]*Waiter, len(keys))
			for i := range keys {
				keys[i] = fmt.Sprint("k", i)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				k := i % len(keys)
				w, err := wl.Join(keys[k], q, now, time.Time{})
				if err != nil {
					b.Fatal(err)
				}
				lines[k] = append(lines[k], w)
				if len(lines[k]) == q.Size {
					wl.Signal(keys[k])
					lines[k][i%q.Size].Leave()
					lines[k] = append(lines[k][:i%q.Size], lines[k][i%q.Size+1:]...)
				}
			}
		})
	}
}
