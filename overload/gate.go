package overload

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// DefaultRetryAfter is the Retry-After of a refusal when Config.RetryAfter
// is zero.
const DefaultRetryAfter = time.Second

// Config configures a Gate. MaxInFlight is required; every other field's
// zero value is the documented default.
type Config struct {
	// MaxInFlight is the service's capacity: how many requests may run at
	// once. Required, at least 1.
	MaxInFlight int
	// Reserve keeps some of the MaxInFlight slots for the important classes.
	Reserve Reserve
	// QueueSize is how many requests may wait for a slot. Zero means no
	// queue: a request that finds no slot for its class is refused at once.
	QueueSize int
	// Order is the drop order of the queue: FIFO (wine, the default) or
	// LIFO (milk).
	Order Order
	// MaxWait bounds how long a request may wait in the queue, whatever its
	// deadline; zero means only its deadline bounds it (and none if it has
	// no deadline: then it waits until served, evicted or cancelled).
	MaxWait time.Duration
	// Shedding says who loses when the queue is full: ByOrder (the
	// default), Fair (by tenant) or Random.
	Shedding Shedding
	// Rand draws the victims of Random shedding (called under the Gate's
	// lock); nil means math/rand/v2's top-level functions.
	Rand *rand.Rand
	// ServiceTime is the first estimate of how long a request runs; zero
	// means none. The Gate smooths the run times it sees with weight 1/8,
	// as TCP smooths round trips, and drops a waiter once its deadline
	// minus that estimate has come.
	ServiceTime time.Duration
	// QueueDelayTarget, when not zero, refuses sheddable requests
	// (Unhealthy) while the oldest waiter has waited longer than it: the
	// queue is standing, not absorbing a burst.
	QueueDelayTarget time.Duration
	// LatencyTarget, when not zero, refuses sheddable requests (Unhealthy)
	// while the smoothed run time is above it: the work behind the gate
	// (an upstream, a database) has slowed down.
	LatencyTarget time.Duration
	// RetryAfter is what a refusal suggests to the client; zero means
	// DefaultRetryAfter.
	RetryAfter time.Duration
}

// Reserve holds back slots of MaxInFlight for the more important classes:
// a critical request may take any slot, a default one only while fewer
// than MaxInFlight − Critical run, a sheddable one only while fewer than
// MaxInFlight − Critical − Default run.
type Reserve struct {
	// Critical is the number of slots only critical requests may take.
	Critical int
	// Default is the number of further slots that sheddable requests may
	// not take.
	Default int
}

// Request describes one request to the Gate.
type Request struct {
	// Priority is its class; the zero value is Default.
	Priority Priority
	// Tenant names whose request it is, for Fair shedding; "" is a tenant
	// like any other.
	Tenant string
	// Deadline is when its answer is due (the client gives up then); the
	// zero Time means none. A request is dropped from the queue as soon as
	// it could no longer be answered by then, and refused at once when that
	// moment would come before its expected turn.
	Deadline time.Time
}

// State is where a Ticket is.
type State int8

// The states of a Ticket. A ticket starts Waiting, Running or Refused;
// Waiting leads to Running, Refused or Canceled; Running to Finished.
const (
	Waiting State = iota + 1
	Running
	Finished
	Refused
	Canceled
)

// String returns the state's name in lower case.
func (s State) String() string {
	switch s {
	case Waiting:
		return "waiting"
	case Running:
		return "running"
	case Finished:
		return "finished"
	case Refused:
		return "refused"
	case Canceled:
		return "canceled"
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// Ticket is one request's passage through a Gate. Its methods read fields
// the Gate changes under its lock: call them once the Gate has handed the
// ticket back (Acquire returned, or it was in a changed list).
type Ticket struct {
	req     Request
	arrived time.Time
	started time.Time
	dropAt  time.Time // when it can no longer be answered in time; zero: never
	state   State
	reason  Reason
	class   int8
	ten     *tenant // Fair only

	inClass  link[Ticket] // its place in the class's queue
	inTenant link[Ticket] // in its tenant's queue of the class (Fair)
	pos      int          // index in queue.all (Random)
	hpos     int          // index in the expiry heap; -1 when not in it

	wake chan struct{} // closed when it leaves Waiting (Acquire only)
}

// Request returns the request as the ticket was created with.
func (t *Ticket) Request() Request { return t.req }

// State returns where the ticket is.
func (t *Ticket) State() State { return t.state }

// Reason returns why it was refused; zero unless State is Refused.
func (t *Ticket) Reason() Reason { return t.reason }

// Arrived returns the instant it came to the Gate.
func (t *Ticket) Arrived() time.Time { return t.arrived }

// Started returns the instant it got a slot; the zero Time if it never did.
func (t *Ticket) Started() time.Time { return t.started }

// Refusal is the error of a refused request. Doors answer it with 503 and
// Retry-After: the service refuses for its own sake, not the client's.
type Refusal struct {
	Reason     Reason
	RetryAfter time.Duration
}

// Error describes the refusal.
func (r *Refusal) Error() string {
	return "overload: refused (" + r.Reason.String() + "): " + r.Reason.detail()
}

// Detail is a sentence for the client, such as a problem body's detail.
func (r *Refusal) Detail() string { return r.Reason.detail() }

// Stats are a Gate's counters.
type Stats struct {
	// InFlight and Waiting are the requests running and queued now.
	InFlight, Waiting int
	// Started counts requests that got a slot; Finished those that gave it
	// back (Done, or Cancel of a running ticket).
	Started, Finished int64
	// Refused counts refusals by reason: Refused[Full] and so on.
	Refused [Unhealthy + 1]int64
	// Canceled counts waiters whose callers gave up (Cancel).
	Canceled int64
	// RunTime is the smoothed run time; zero until known.
	RunTime time.Duration
}

// Gate is admission control for a whole service (see the package doc): at
// most MaxInFlight requests run, a bounded queue holds a few more, and the
// least important work goes first. Its core methods (Arrive, Done, Cancel,
// Expire) take the instant and return the tickets whose state changed;
// Acquire and Release add the wall clock. It is safe for concurrent use.
type Gate struct {
	cfg   Config
	limit [numClasses]int // a class runs while inFlight < limit[class]

	mu       sync.Mutex
	inFlight int
	waiting  int
	q        [numClasses]queue
	exp      expiryHeap
	tenants  map[string]*tenant // Fair only: tenants with a running or waiting request
	est      time.Duration      // smoothed run time
	stats    Stats
}

// queue is one class's waiters, oldest first.
type queue struct {
	list[Ticket]
	all   []*Ticket  // Random: every waiter, in no order
	heavy tenantHeap // Fair: tenants with waiters here, heaviest first
}

// tenant is one tenant's share of the gate.
type tenant struct {
	name  string
	usage int                      // running + waiting
	w     [numClasses]list[Ticket] // its waiters per class, oldest first
	hidx  [numClasses]int          // index in q[c].heavy; -1 when absent
}

// New validates cfg and returns a Gate.
func New(cfg Config) (*Gate, error) {
	switch {
	case cfg.MaxInFlight < 1:
		return nil, fmt.Errorf("overload: max in flight %d: want at least 1", cfg.MaxInFlight)
	case cfg.Reserve.Critical < 0 || cfg.Reserve.Default < 0:
		return nil, fmt.Errorf("overload: reserve %d critical, %d default: want no negative count", cfg.Reserve.Critical, cfg.Reserve.Default)
	case cfg.Reserve.Critical+cfg.Reserve.Default >= cfg.MaxInFlight:
		return nil, fmt.Errorf("overload: reserve %d critical + %d default leaves no slot of the %d for sheddable work", cfg.Reserve.Critical, cfg.Reserve.Default, cfg.MaxInFlight)
	case cfg.QueueSize < 0:
		return nil, fmt.Errorf("overload: queue size %d: want 0 (no queue) or more", cfg.QueueSize)
	case cfg.Order != FIFO && cfg.Order != LIFO:
		return nil, fmt.Errorf("overload: unknown %v", cfg.Order)
	case cfg.Shedding != ByOrder && cfg.Shedding != Fair && cfg.Shedding != Random:
		return nil, fmt.Errorf("overload: unknown %v", cfg.Shedding)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"max wait", cfg.MaxWait}, {"service time", cfg.ServiceTime}, {"queue delay target", cfg.QueueDelayTarget}, {"latency target", cfg.LatencyTarget}, {"retry after", cfg.RetryAfter}} {
		if d.v < 0 {
			return nil, fmt.Errorf("overload: %s %v: want zero or more", d.name, d.v)
		}
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	g := &Gate{cfg: cfg, est: cfg.ServiceTime}
	g.limit[Critical.index()] = cfg.MaxInFlight
	g.limit[Default.index()] = cfg.MaxInFlight - cfg.Reserve.Critical
	g.limit[Sheddable.index()] = cfg.MaxInFlight - cfg.Reserve.Critical - cfg.Reserve.Default
	for c := range g.q {
		g.q[c].heavy.c = c
	}
	if cfg.Shedding == Fair {
		g.tenants = map[string]*tenant{}
	}
	return g, nil
}

// Config returns the configuration, defaults filled in.
func (g *Gate) Config() Config { return g.cfg }

// Stats returns the counters.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.InFlight, s.Waiting, s.RunTime = g.inFlight, g.waiting, g.est
	return s
}

// Refusal returns the error for a refused ticket, nil for any other.
func (g *Gate) Refusal(t *Ticket) *Refusal {
	if t == nil || t.state != Refused {
		return nil
	}
	return &Refusal{Reason: t.reason, RetryAfter: g.cfg.RetryAfter}
}

// Arrive decides a request that comes at now and returns its ticket:
// Running (it has a slot: run it, then call Done), Waiting (queued: it will
// appear in the changed list of a later call, Running or Refused) or
// Refused. Other tickets whose state changed — waiters it pushed out, or
// that expired — are appended to changed, which is returned.
func (g *Gate) Arrive(now time.Time, r Request, changed []*Ticket) (*Ticket, []*Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrive(now, r, changed)
}

// Done gives back the slot of a Running ticket at now (the request ended,
// for whatever reason) and appends to changed the waiters that got a slot
// and those that expired. A ticket that is not Running is left alone.
func (g *Gate) Done(now time.Time, t *Ticket, changed []*Ticket) []*Ticket {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.done(now, t, true, changed)
}

// Cancel is for a caller that gives up on its ticket at now: a Waiting
// ticket leaves the queue (Canceled); a Running one gives its slot back as
// with Done but without counting its run time. Tickets whose state changed
// in consequence are appended to changed.
func (g *Gate) Cancel(now time.Time, t *Ticket, changed []*Ticket) []*Ticket {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cancel(now, t, changed)
}

// Expire drops, as Refused (Late), every waiter that can no longer be
// answered in time at now, and appends them to changed. Arrive and Done
// expire first anyway; a simulation calls Expire before any other event so
// that the queue holds no expired waiter at any instant.
func (g *Gate) Expire(now time.Time, changed []*Ticket) []*Ticket {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.expire(now, changed)
}

// NextExpiry returns the earliest instant at which a waiter will expire;
// ok is false when no waiter has one.
func (g *Gate) NextExpiry() (at time.Time, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.exp) == 0 {
		return time.Time{}, false
	}
	return g.exp[0].dropAt, true
}

func (g *Gate) arrive(now time.Time, r Request, changed []*Ticket) (*Ticket, []*Ticket) {
	changed = g.expire(now, changed)
	t := &Ticket{req: r, arrived: now, class: int8(r.Priority.index()), hpos: -1}
	c := int(t.class)
	if c == Sheddable.index() && g.unhealthy(now) {
		g.refuse(t, Unhealthy)
		return t, changed
	}
	if !r.Deadline.IsZero() && !r.Deadline.After(now) {
		g.refuse(t, Late) // already due: nobody is waiting for the answer
		return t, changed
	}
	if g.inFlight < g.limit[c] {
		// A free slot for its class: the queue holds nobody of its class or
		// above (admit gives every freed slot to them at once), so it jumps
		// nobody.
		g.join(t)
		g.start(t, now)
		return t, changed
	}
	if g.cfg.QueueSize == 0 {
		g.refuse(t, Full)
		return t, changed
	}
	t.dropAt = g.dropTime(now, r)
	if !t.dropAt.IsZero() && (!t.dropAt.After(now) || g.expectedStart(now, c).After(t.dropAt)) {
		// It would expire before its turn: say so now rather than after the
		// wait.
		g.refuse(t, Late)
		return t, changed
	}
	if g.waiting >= g.cfg.QueueSize {
		v, ok := g.victim(t)
		if !ok {
			g.refuse(t, Full)
			return t, changed
		}
		g.drop(v, Evicted)
		changed = append(changed, v)
	}
	g.join(t)
	g.enqueue(t)
	return t, changed
}

func (g *Gate) done(now time.Time, t *Ticket, observe bool, changed []*Ticket) []*Ticket {
	if t == nil || t.state != Running {
		return changed
	}
	t.state = Finished
	g.inFlight--
	g.stats.Finished++
	if observe {
		d := now.Sub(t.started)
		if g.est == 0 {
			g.est = d
		} else {
			g.est += (d - g.est) / 8
		}
	}
	g.leave(t)
	changed = g.expire(now, changed)
	return g.admit(now, changed)
}

func (g *Gate) cancel(now time.Time, t *Ticket, changed []*Ticket) []*Ticket {
	switch {
	case t == nil:
	case t.state == Running:
		return g.done(now, t, false, changed)
	case t.state == Waiting:
		g.unqueue(t)
		g.leave(t)
		t.state = Canceled
		g.stats.Canceled++
	}
	return changed
}

func (g *Gate) expire(now time.Time, changed []*Ticket) []*Ticket {
	for len(g.exp) > 0 && !g.exp[0].dropAt.After(now) {
		t := g.exp[0]
		g.drop(t, Late)
		changed = append(changed, t)
	}
	return changed
}

// admit gives free slots to waiters, the highest class first, in Order
// within a class. Limits fall with the class, so when the highest class
// waiting cannot run, no lower one can.
func (g *Gate) admit(now time.Time, changed []*Ticket) []*Ticket {
	for c := numClasses - 1; c >= 0; {
		q := &g.q[c]
		if q.n == 0 {
			c--
			continue
		}
		if g.inFlight >= g.limit[c] {
			break
		}
		t := q.front()
		if g.cfg.Order == LIFO {
			t = q.back()
		}
		g.unqueue(t)
		g.start(t, now)
		changed = append(changed, t)
	}
	return changed
}

// unhealthy reports whether sheddable work should be refused at now.
func (g *Gate) unhealthy(now time.Time) bool {
	if g.cfg.LatencyTarget > 0 && g.est > g.cfg.LatencyTarget {
		return true
	}
	if g.cfg.QueueDelayTarget > 0 && g.waiting > 0 {
		for c := range g.q {
			if h := g.q[c].front(); h != nil && now.Sub(h.arrived) > g.cfg.QueueDelayTarget {
				return true
			}
		}
	}
	return false
}

// dropTime is when a request arriving at now stops being worth a slot: its
// deadline minus the expected run time, or the end of its longest wait.
func (g *Gate) dropTime(now time.Time, r Request) time.Time {
	var at time.Time
	if g.cfg.MaxWait > 0 {
		at = now.Add(g.cfg.MaxWait)
	}
	if !r.Deadline.IsZero() {
		if d := r.Deadline.Add(-g.est); at.IsZero() || d.Before(at) {
			at = d
		}
	}
	return at
}

// expectedStart estimates when a request of class c queued at now gets a
// slot: after the waiters served before it (of higher classes, and of its
// own under FIFO) and itself each take their turn on the class's slots.
// Zero run time estimate, zero wait.
func (g *Gate) expectedStart(now time.Time, c int) time.Time {
	if g.est == 0 {
		return now
	}
	ahead := 0
	for i := c + 1; i < numClasses; i++ {
		ahead += g.q[i].n
	}
	if g.cfg.Order == FIFO {
		ahead += g.q[c].n
	}
	return now.Add(g.est * time.Duration(ahead+1) / time.Duration(g.limit[c]))
}

// victim chooses the request that leaves a full queue to let t in: from the
// lowest class among t's and those waiting, by Shedding. ok false means t
// itself.
func (g *Gate) victim(t *Ticket) (v *Ticket, ok bool) {
	vc := int(t.class)
	for c := 0; c < vc; c++ {
		if g.q[c].n > 0 {
			vc = c
			break
		}
	}
	q := &g.q[vc]
	in := vc == int(t.class) // t competes with the waiters of vc
	switch g.cfg.Shedding {
	case Random:
		n := q.n
		if in {
			n++
		}
		var k int
		if g.cfg.Rand != nil {
			k = g.cfg.Rand.IntN(n)
		} else {
			k = rand.IntN(n)
		}
		if k == q.n {
			return nil, false
		}
		return q.all[k], true
	case Fair:
		top := q.heavy.top()
		if !in {
			return g.pickTenant(top, vc), true
		}
		a := 1 // t's tenant's usage, t included
		own := g.tenants[t.req.Tenant]
		if own != nil {
			a += own.usage
		}
		if top != nil && top.usage > a {
			return g.pickTenant(top, vc), true
		}
		if g.cfg.Order == LIFO {
			// Milk among equals: the newcomer's tenant is as heavy as any,
			// so the oldest waiter goes if that keeps the shares as even —
			// its own oldest, or the class's oldest if its tenant is as
			// heavy as the newcomer's would be.
			if own != nil && own.w[vc].n > 0 {
				return own.w[vc].front(), true
			}
			if h := q.front(); h != nil && h.ten.usage >= a {
				return h, true
			}
		}
		return nil, false
	}
	if g.cfg.Order == LIFO {
		return q.front(), q.n > 0
	}
	if in {
		return nil, false
	}
	return q.back(), true
}

// pickTenant returns which of ten's waiters of class c goes: its newest
// under FIFO (keep the oldest), its oldest under LIFO.
func (g *Gate) pickTenant(ten *tenant, c int) *Ticket {
	if g.cfg.Order == LIFO {
		return ten.w[c].front()
	}
	return ten.w[c].back()
}

func (g *Gate) refuse(t *Ticket, r Reason) {
	t.state, t.reason = Refused, r
	g.stats.Refused[r]++
}

// drop refuses a waiter.
func (g *Gate) drop(t *Ticket, r Reason) {
	g.unqueue(t)
	g.leave(t)
	g.refuse(t, r)
}

func (g *Gate) start(t *Ticket, now time.Time) {
	t.state, t.started = Running, now
	g.inFlight++
	g.stats.Started++
}

func (g *Gate) enqueue(t *Ticket) {
	t.state = Waiting
	q := &g.q[t.class]
	q.push(&t.inClass, t)
	g.waiting++
	if g.cfg.Shedding == Random {
		t.pos = len(q.all)
		q.all = append(q.all, t)
	}
	if !t.dropAt.IsZero() {
		heap.Push(&g.exp, t)
	}
	if ten := t.ten; ten != nil {
		w := &ten.w[t.class]
		w.push(&t.inTenant, t)
		if w.n == 1 {
			heap.Push(&q.heavy, ten)
		}
	}
}

func (g *Gate) unqueue(t *Ticket) {
	q := &g.q[t.class]
	q.remove(&t.inClass)
	g.waiting--
	if g.cfg.Shedding == Random {
		last := q.all[len(q.all)-1]
		q.all[t.pos] = last
		last.pos = t.pos
		q.all[len(q.all)-1] = nil
		q.all = q.all[:len(q.all)-1]
	}
	if t.hpos >= 0 {
		heap.Remove(&g.exp, t.hpos)
	}
	if ten := t.ten; ten != nil {
		w := &ten.w[t.class]
		w.remove(&t.inTenant)
		if w.n == 0 {
			heap.Remove(&q.heavy, ten.hidx[t.class])
		}
	}
}

// join counts t in its tenant's usage (Fair only).
func (g *Gate) join(t *Ticket) {
	if g.tenants == nil {
		return
	}
	ten := g.tenants[t.req.Tenant]
	if ten == nil {
		ten = &tenant{name: t.req.Tenant, hidx: [numClasses]int{-1, -1, -1}}
		g.tenants[ten.name] = ten
	}
	t.ten = ten
	g.setUsage(ten, ten.usage+1)
}

// leave uncounts t, which is no longer running or waiting.
func (g *Gate) leave(t *Ticket) {
	ten := t.ten
	if ten == nil {
		return
	}
	t.ten = nil
	g.setUsage(ten, ten.usage-1)
	if ten.usage == 0 {
		delete(g.tenants, ten.name)
	}
}

func (g *Gate) setUsage(ten *tenant, u int) {
	ten.usage = u
	for c := range ten.hidx {
		if i := ten.hidx[c]; i >= 0 {
			heap.Fix(&g.q[c].heavy, i)
		}
	}
}

// expiryHeap orders waiters by dropAt, earliest first.
type expiryHeap []*Ticket

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].dropAt.Before(h[j].dropAt) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hpos, h[j].hpos = i, j
}
func (h *expiryHeap) Push(x any) {
	t := x.(*Ticket)
	t.hpos = len(*h)
	*h = append(*h, t)
}
func (h *expiryHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.hpos = -1
	return t
}

// tenantHeap orders the tenants with waiters in class c by usage, heaviest
// first.
type tenantHeap struct {
	c int
	h []*tenant
}

func (h *tenantHeap) top() *tenant {
	if len(h.h) == 0 {
		return nil
	}
	return h.h[0]
}

func (h *tenantHeap) Len() int           { return len(h.h) }
func (h *tenantHeap) Less(i, j int) bool { return h.h[i].usage > h.h[j].usage }
func (h *tenantHeap) Swap(i, j int) {
	h.h[i], h.h[j] = h.h[j], h.h[i]
	h.h[i].hidx[h.c], h.h[j].hidx[h.c] = i, j
}
func (h *tenantHeap) Push(x any) {
	ten := x.(*tenant)
	ten.hidx[h.c] = len(h.h)
	h.h = append(h.h, ten)
}
func (h *tenantHeap) Pop() any {
	ten := h.h[len(h.h)-1]
	h.h[len(h.h)-1] = nil
	h.h = h.h[:len(h.h)-1]
	ten.hidx[h.c] = -1
	return ten
}
