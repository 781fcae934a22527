// Package overload protects a whole service when the sum of what every
// client may send is more than it can do. A rate limit looks at one
// client's behaviour; a Gate looks at the service's health and refuses work
// for the service's own sake, early and least important first:
//
//   - load shedding: at most Config.MaxInFlight requests run, slots are
//     reserved for the important classes (Reserve), and sheddable work is
//     refused as soon as the queue stands or the work behind the gate slows
//     down (QueueDelayTarget, LatencyTarget);
//   - a bounded queue with deadlines (QueueSize, MaxWait): a request leaves
//     it the moment it could no longer be answered in time, or is refused at
//     once when that moment would come before its turn;
//   - two drop orders: FIFO (wine: keep the oldest) and LIFO (milk: keep
//     the newest and serve it first);
//   - fair shedding by tenant (Fair): when the queue is full, the tenant
//     holding the most of the gate gives up a request, so that small tenants
//     are not punished for a noisy neighbour.
//
// A Gate knows nothing of HTTP (httplimit.Shed is its net/http adapter) nor
// of the clock: Arrive, Done, Cancel and Expire take the instant, which is
// how "portero sim" drives it on a virtual clock; Acquire and Release add
// the wall clock and real waiting. It holds at most MaxInFlight + QueueSize
// tickets, whatever clients send.
//
// A Waitlist is the waiting for per-key concurrency limits (decided by the
// engine, engine.Rule.Concurrency): the requests a limit refused wait per
// key in a bounded Queue with deadlines, FIFO or LIFO, until a slot comes
// back.
package overload
