package overload_test

import (
	"fmt"
	"time"

	"github.com/portero-rl/portero/overload"
)

// A service that runs two requests at once, with one place to wait, driven
// on a virtual clock: the third request waits, the fourth is refused, and
// the waiter gets the first slot that frees.
func Example() {
	g, err := overload.New(overload.Config{MaxInFlight: 2, QueueSize: 1})
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	var tickets []*overload.Ticket
	for range 4 {
		t, _ := g.Arrive(now, overload.Request{}, nil)
		tickets = append(tickets, t)
		if t.State() == overload.Refused {
			fmt.Println(t.State(), t.Reason())
		} else {
			fmt.Println(t.State())
		}
	}
	changed := g.Done(now.Add(100*time.Millisecond), tickets[0], nil)
	fmt.Println(changed[0] == tickets[2], tickets[2].State())
	// Output:
	// running
	// running
	// waiting
	// refused full
	// true running
}

// Priorities: a slot kept for critical work, so that a flood of ordinary
// requests cannot take the last one.
func ExampleReserve() {
	g, _ := overload.New(overload.Config{MaxInFlight: 3, Reserve: overload.Reserve{Critical: 1}})
	now := time.Unix(0, 0)
	for _, p := range []overload.Priority{overload.Default, overload.Default, overload.Default, overload.Critical} {
		t, _ := g.Arrive(now, overload.Request{Priority: p}, nil)
		fmt.Println(p, t.State())
	}
	// Output:
	// default running
	// default running
	// default refused
	// critical running
}

// A queue rule of 2 per second (one departure every 0.5 s) shaped as
// nginx's delay=N with N = 2: the first two places pass at once, the rest
// are spaced out.
func ExampleShape() {
	s := overload.Shape{Delay: 2}
	interval := 500 * time.Millisecond
	for place := 1; place <= 5; place++ {
		departure := time.Duration(place) * interval
		fmt.Println(place, s.Hold(departure, interval))
	}
	// Output:
	// 1 0s
	// 2 0s
	// 3 500ms
	// 4 1s
	// 5 1.5s
}
