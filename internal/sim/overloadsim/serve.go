// Package overloadsim holds the experiments of "portero sim" about
// protecting a whole service: what a queue does under overload (sim
// overload), who pays for a noisy neighbour (sim noisy-neighbour) and
// Little's law for a concurrency limit against a rate limit (sim little).
//
// They drive the real mechanisms — an overload.Gate, and for the rate limit
// a portero.Store — on a virtual clock: trace time t is sim.Epoch plus t,
// requests arrive at fixed instants, every request runs a fixed time, and
// nothing reads the wall clock or draws an unseeded number, so every run
// prints the same figures.
package overloadsim

import (
	"time"

	"github.com/portero-rl/portero/internal/sim"
	"github.com/portero-rl/portero/overload"
)

// Job is one request of an experiment and what became of it.
type Job struct {
	// At is its arrival, as trace time.
	At time.Duration
	// Req is what the Gate is told; its Deadline is absolute (sim.Epoch
	// plus trace time), or zero.
	Req overload.Request
	// Class labels it for the tables ("small", "large"…).
	Class string

	// Started and Finished are trace times; Ran and Done say whether they
	// happened (before the end of the run).
	Started, Finished time.Duration
	Ran, Done         bool
	// Refused is why the Gate refused it; zero when it did not.
	Refused overload.Reason
}

// Latency is from arrival to the end of the answer.
func (j *Job) Latency() time.Duration { return j.Finished - j.At }

// serve runs jobs (sorted by arrival) through g in front of a service where
// each request runs for run, processing the events before stop (all of
// them when stop is zero). At the same instant a request that ends gives
// its slot back before a new one arrives, and before anything else the Gate
// expires the waiters due, so that no expired waiter holds a place at any
// instant.
func serve(g *overload.Gate, jobs []*Job, run time.Duration, stop time.Duration) {
	byTicket := make(map[*overload.Ticket]*Job)
	var ends sim.Events[*overload.Ticket] // running requests, by their end
	var changed []*overload.Ticket
	// update records what became of a request whose ticket changed state.
	update := func(tk *overload.Ticket) {
		j := byTicket[tk]
		switch tk.State() {
		case overload.Running:
			j.Ran, j.Started = true, tk.Started().Sub(sim.Epoch)
			ends.Push(j.Started+run, tk)
		case overload.Refused:
			j.Refused = tk.Reason()
			delete(byTicket, tk)
		}
	}
	next := 0
	for {
		var now time.Duration
		ending := ends.Len() > 0 && (next == len(jobs) || ends.Next() <= jobs[next].At)
		switch {
		case ending:
			now = ends.Next()
		case next < len(jobs):
			now = jobs[next].At
		default:
			return
		}
		if stop > 0 && now >= stop {
			return
		}
		t := sim.Epoch.Add(now)
		changed = g.Expire(t, changed[:0])
		for _, tk := range changed {
			update(tk)
		}
		if ending {
			_, tk := ends.Pop()
			j := byTicket[tk]
			delete(byTicket, tk)
			j.Done, j.Finished = true, now
			changed = g.Done(t, tk, changed[:0])
		} else {
			j := jobs[next]
			next++
			var tk *overload.Ticket
			tk, changed = g.Arrive(t, j.Req, changed[:0])
			byTicket[tk] = j
			update(tk)
		}
		for _, tk := range changed {
			update(tk)
		}
	}
}

// every returns the instants k·1s/rate for k in [0, n) shifted by offset,
// in whole nanoseconds.
func every(rate float64, n int, offset time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for k := range out {
		out[k] = offset + time.Duration(float64(k)*float64(time.Second)/rate)
	}
	return out
}
