// Package overload protects a whole service when the sum of what every
// client may send is more than it can do: the rate limiter's neighbours
// from the seed's "Justo no es lo mismo que seguro". A rate limit looks at
// one client's behaviour; a Gate looks at the service's health and refuses
// work for the service's own sake, early and least important first:
//
//   - load shedding: at most Config.MaxInFlight requests run; slots are
//     reserved for the critical class (Reserve), and sheddable work is
//     refused as soon as the queue stands or the work behind the gate slows
//     down (QueueDelayTarget, LatencyTarget);
//   - a bounded queue with deadlines: a request may wait briefly for a slot
//     (QueueSize, MaxWait), and leaves the queue the moment it could no
//     longer be answered in time — its deadline minus the measured run time
//     — or is refused at once when that moment would come before its turn;
//   - the seed's two drop orders: FIFO (wine, keep the oldest) and LIFO
//     (milk, keep the newest and serve it first);
//   - fair shedding by tenant: when the queue is full, the tenant holding
//     the most of the gate gives up a request, so small tenants within
//     their share are not punished for a noisy neighbour (Fair).
//
// A Gate knows nothing of HTTP: httplimit.Shed is its net/http adapter,
// which answers refusals with 503, Retry-After and the problem type
// temporary-reduced-capacity before the body is read. Time is a parameter:
// Arrive, Done, Cancel and Expire take the instant and return the tickets
// whose state changed, which is how the experiments of "portero sim"
// (overload, noisy-neighbour, little) drive the same Gate on a virtual
// clock; Acquire and Release add the wall clock and real waiting.
//
// Memory is bounded by the configuration, never by what clients send: a
// Gate holds at most MaxInFlight + QueueSize tickets and, for Fair
// shedding, one entry per tenant among them.
//
// Per-key concurrency limits (at most C in flight per client, API key or
// tenant, shared through a store) are another neighbour, decided by the
// engine (engine.Rule.Concurrency); a Gate counts the whole service in one
// process. What this package gives them is the waiting: a Waitlist holds
// the requests a concurrency limit refused, per key, in a bounded Queue
// with deadlines, FIFO or LIFO, until a slot comes back.
package overload
