package overload

import (
	"fmt"
	"strings"
)

// Priority is a request's class: how much it is worth when the service must
// refuse some work. The zero value is Default.
type Priority int8

// The three classes, from the first to go to the last.
const (
	// Sheddable work goes first: prefetches, batch jobs, retries of
	// background work. It is refused as soon as the service looks unhealthy
	// (Config.QueueDelayTarget, Config.LatencyTarget) and never takes the
	// slots reserved for the other classes.
	Sheddable Priority = -1
	// Default is ordinary traffic.
	Default Priority = 0
	// Critical work (checkout, login, health checks of a load balancer) is
	// the last to go and alone may use Reserve.Critical.
	Critical Priority = 1
)

// priorities lists the classes by index (Priority+1).
var priorities = [numClasses]Priority{Sheddable, Default, Critical}

const numClasses = 3

// index is p's place in per-class arrays: 0 sheddable … 2 critical. Values
// outside the three classes count as the nearest one.
func (p Priority) index() int {
	switch {
	case p < Sheddable:
		return 0
	case p > Critical:
		return numClasses - 1
	}
	return int(p) + 1
}

// String returns "sheddable", "default" or "critical".
func (p Priority) String() string {
	return name(p, priorityNames[:], "Priority", int(p)+1)
}

var priorityNames = [numClasses]string{"sheddable", "default", "critical"}

// ParsePriority reads "critical", "default" or "sheddable" (any case).
func ParsePriority(s string) (Priority, error) {
	i, ok := parseName(s, priorityNames[:])
	if !ok {
		return Default, fmt.Errorf("priority %q: want critical, default or sheddable", s)
	}
	return priorities[i], nil
}

// name returns names[i], or typ(v) when i is out of their range.
func name[T ~int8](v T, names []string, typ string, i int) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", typ, int8(v))
}

// parseName returns the index of s among names, in any case.
func parseName(s string, names []string) (int, bool) {
	for i, n := range names {
		if strings.EqualFold(s, n) {
			return i, true
		}
	}
	return 0, false
}

// Order says which waiters a full queue keeps and which it serves first:
// the two drop policies. The zero value is FIFO.
type Order int8

const (
	// FIFO is the wine policy: keep the oldest. Waiters are served oldest
	// first, and a full queue refuses the newcomer. For transfers and
	// anything where losing old work means redoing what follows it.
	FIFO Order = iota
	// LIFO is the milk policy: keep the newest. Waiters are served newest
	// first, and a full queue drops its oldest waiter to make room. For
	// interactive traffic, where a late answer is worthless: under overload
	// the newest requests, whose clients are still waiting, are answered
	// fast, and the oldest ones, likely abandoned already, go.
	LIFO
)

// String returns "fifo" or "lifo".
func (o Order) String() string { return name(o, []string{"fifo", "lifo"}, "Order", int(o)) }

// ParseOrder reads "fifo" (or "wine") and "lifo" (or "milk"), any case.
func ParseOrder(s string) (Order, error) {
	switch strings.ToLower(s) {
	case "fifo", "wine":
		return FIFO, nil
	case "lifo", "milk":
		return LIFO, nil
	}
	return FIFO, fmt.Errorf("order %q: want fifo (wine) or lifo (milk)", s)
}

// Shedding says who loses when a request finds no slot and the queue full.
// The zero value is ByOrder.
type Shedding int8

const (
	// ByOrder lets the Order decide: FIFO refuses the newcomer, LIFO drops
	// the oldest waiter of the class.
	ByOrder Shedding = iota
	// Fair takes the excess from the tenant holding the most of the gate
	// (running plus waiting requests): a newcomer from a light tenant pushes
	// out a waiter of the heaviest one, and a newcomer from the heaviest
	// tenant is refused. Within the losing tenant the Order picks which
	// request goes. Among tenants equally heavy, FIFO refuses the newcomer
	// and LIFO drops the oldest waiter, so that a flood of tenants with one
	// request each is shed in the drop order. Small tenants within their
	// share are served in full while a noisy neighbour absorbs the loss.
	Fair
	// Random drops a request chosen uniformly among the waiters of the class
	// and the newcomer, so that every tenant loses in the same proportion.
	// It is the baseline of the noisy-neighbour experiment, not a policy to
	// choose.
	Random
)

// String returns "by-order", "fair" or "random".
func (s Shedding) String() string { return name(s, sheddingNames, "Shedding", int(s)) }

var sheddingNames = []string{"by-order", "fair", "random"}

// ParseShedding reads "by-order", "fair" or "random" (any case).
func ParseShedding(s string) (Shedding, error) {
	i, ok := parseName(s, sheddingNames)
	if !ok {
		return ByOrder, fmt.Errorf("shedding %q: want by-order, fair or random", s)
	}
	return Shedding(i), nil
}

// Reason says why a request was refused.
type Reason int8

const (
	// Full: no slot for its class and no place in the queue (or no queue).
	Full Reason = iota + 1
	// Evicted: it was waiting and was pushed out of a full queue by a newer
	// request (LIFO), a request of a higher class, or one of a lighter
	// tenant (Fair).
	Evicted
	// Late: it could no longer be answered in time: its deadline minus the
	// expected run time, or its longest wait (Config.MaxWait), came while it
	// waited, or would come before its expected turn.
	Late
	// Unhealthy: a sheddable request refused because the service looks
	// overloaded (queueing delay or run time over their targets).
	Unhealthy
)

// String returns "full", "evicted", "late" or "unhealthy".
func (r Reason) String() string {
	return name(r, []string{"full", "evicted", "late", "unhealthy"}, "Reason", int(r)-1)
}

// detail is the sentence a door shows for a refusal of reason r.
func (r Reason) detail() string {
	switch r {
	case Full:
		return "the service is at capacity and its queue is full"
	case Evicted:
		return "the request was pushed out of the service's queue by more urgent work"
	case Late:
		return "the service could not have answered the request in time"
	case Unhealthy:
		return "the service is overloaded and sheds low-priority work"
	}
	return "the service refused the request"
}
