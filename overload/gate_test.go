package overload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(0, 0)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// at is the instant n milliseconds after t0.
func at(n int) time.Time { return t0.Add(ms(n)) }

func newGate(t *testing.T, cfg Config) *Gate {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return g
}

// driver names tickets so that step tables can refer to them.
type driver struct {
	t       *testing.T
	g       *Gate
	tickets map[string]*Ticket
}

func drive(t *testing.T, cfg Config) *driver {
	return &driver{t: t, g: newGate(t, cfg), tickets: map[string]*Ticket{}}
}

// arrive sends request name at instant n ms and checks its state (and
// reason, when refused) and the names of the other tickets that changed.
func (d *driver) arrive(n int, name string, r Request, want State, wantReason Reason, wantChanged ...string) {
	d.t.Helper()
	tk, changed := d.g.Arrive(at(n), r, nil)
	d.tickets[name] = tk
	if tk.State() != want || tk.Reason() != wantReason {
		d.t.Errorf("at %dms Arrive(%s %+v) = %v/%v, want %v/%v", n, name, r, tk.State(), tk.Reason(), want, wantReason)
	}
	d.changed(fmt.Sprintf("Arrive(%s)", name), changed, wantChanged)
	d.check()
}

// done ends ticket name at n ms and checks which tickets changed.
func (d *driver) done(n int, name string, wantChanged ...string) {
	d.t.Helper()
	changed := d.g.Done(at(n), d.tickets[name], nil)
	d.changed(fmt.Sprintf("at %dms Done(%s)", n, name), changed, wantChanged)
	d.check()
}

func (d *driver) expire(n int, wantChanged ...string) {
	d.t.Helper()
	changed := d.g.Expire(at(n), nil)
	d.changed(fmt.Sprintf("Expire(%dms)", n), changed, wantChanged)
	d.check()
}

// state checks ticket name.
func (d *driver) state(name string, want State, wantReason Reason) {
	d.t.Helper()
	tk := d.tickets[name]
	if tk.State() != want || tk.Reason() != wantReason {
		d.t.Errorf("%s is %v/%v, want %v/%v", name, tk.State(), tk.Reason(), want, wantReason)
	}
}

func (d *driver) changed(call string, got []*Ticket, want []string) {
	d.t.Helper()
	names := map[*Ticket]string{}
	for n, tk := range d.tickets {
		names[tk] = n
	}
	var gotNames []string
	for _, tk := range got {
		gotNames = append(gotNames, names[tk]+"="+tk.State().String())
	}
	if fmt.Sprint(gotNames) != fmt.Sprint(want) {
		d.t.Errorf("%s changed %v, want %v", call, gotNames, want)
	}
}

func (d *driver) check() {
	d.t.Helper()
	if err := d.g.check(); err != nil {
		d.t.Fatal(err)
	}
}

// check verifies the Gate's invariants: counts agree with the queues, no
// slot is free while a class that may use it waits, the lists, heaps and
// tenant usages are consistent, and no tenant without a request is kept.
func (g *Gate) check() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight < 0 || g.inFlight > g.cfg.MaxInFlight {
		return fmt.Errorf("inFlight %d outside [0, %d]", g.inFlight, g.cfg.MaxInFlight)
	}
	if g.waiting > g.cfg.QueueSize {
		return fmt.Errorf("waiting %d > QueueSize %d", g.waiting, g.cfg.QueueSize)
	}
	total, expiring := 0, 0
	usage := map[*tenant]int{}
	for c := range g.q {
		q := &g.q[c]
		n := 0
		var prev *link[Ticket]
		for l := q.head; l != nil; l = l.next {
			t := l.v
			if l.prev != prev || &t.inClass != l || int(t.class) != c || t.state != Waiting {
				return fmt.Errorf("class %d: broken list at a ticket %v class %d", c, t.state, t.class)
			}
			if prev != nil && t.arrived.Before(prev.v.arrived) {
				return fmt.Errorf("class %d: list out of arrival order", c)
			}
			if !t.dropAt.IsZero() {
				expiring++
				if t.hpos < 0 || g.exp[t.hpos] != t {
					return fmt.Errorf("class %d: a waiter with a drop time is not in the expiry heap", c)
				}
			}
			if g.tenants != nil {
				if t.ten == nil || g.tenants[t.ten.name] != t.ten {
					return fmt.Errorf("class %d: waiter of tenant %q not counted", c, t.req.Tenant)
				}
				usage[t.ten]++
			}
			prev, n = l, n+1
		}
		if q.tail != prev || q.n != n {
			return fmt.Errorf("class %d: n %d tail ok %v, list has %d", c, q.n, q.tail == prev, n)
		}
		if g.cfg.Shedding == Random {
			if len(q.all) != n {
				return fmt.Errorf("class %d: all has %d, list %d", c, len(q.all), n)
			}
			for i, t := range q.all {
				if t.pos != i || t.state != Waiting {
					return fmt.Errorf("class %d: all[%d] misplaced", c, i)
				}
			}
		}
		if n > 0 && g.inFlight < g.limit[c] {
			return fmt.Errorf("class %d has %d waiting while %d run, under its limit %d", c, n, g.inFlight, g.limit[c])
		}
		total += n
	}
	if total != g.waiting || len(g.exp) != expiring {
		return fmt.Errorf("waiting %d, lists %d; heap %d, with drop times %d", g.waiting, total, len(g.exp), expiring)
	}
	for i := 1; i < len(g.exp); i++ {
		if g.exp[i].dropAt.Before(g.exp[(i-1)/2].dropAt) {
			return fmt.Errorf("expiry heap out of order at %d", i)
		}
	}
	if g.tenants != nil {
		running := 0
		for name, ten := range g.tenants {
			if ten.name != name || ten.usage <= 0 {
				return fmt.Errorf("tenant %q kept with usage %d", name, ten.usage)
			}
			waiting := usage[ten]
			running += ten.usage - waiting
			for c := range ten.w {
				n := 0
				for l := ten.w[c].head; l != nil; l = l.next {
					if t := l.v; &t.inTenant != l || t.ten != ten || int(t.class) != c {
						return fmt.Errorf("tenant %q class %d: broken list", name, c)
					}
					n++
				}
				if n != ten.w[c].n || (n > 0) != (ten.hidx[c] >= 0) {
					return fmt.Errorf("tenant %q class %d: %d in list, n %d, heap index %d", name, c, n, ten.w[c].n, ten.hidx[c])
				}
				if n > 0 && g.q[c].heavy.h[ten.hidx[c]] != ten {
					return fmt.Errorf("tenant %q class %d: wrong heap index", name, c)
				}
			}
		}
		if running != g.inFlight {
			return fmt.Errorf("tenants' running requests add up to %d, inFlight is %d", running, g.inFlight)
		}
		for c := range g.q {
			h := g.q[c].heavy.h
			for i := 1; i < len(h); i++ {
				if h[i].usage > h[(i-1)/2].usage {
					return fmt.Errorf("class %d: tenant heap out of order", c)
				}
			}
		}
	}
	return nil
}

func TestNewErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{MaxInFlight: -1},
		{MaxInFlight: 4, Reserve: Reserve{Critical: 2, Default: 2}},
		{MaxInFlight: 4, Reserve: Reserve{Critical: -1}},
		{MaxInFlight: 4, QueueSize: -1},
		{MaxInFlight: 4, Order: 7},
		{MaxInFlight: 4, Shedding: 7},
		{MaxInFlight: 4, MaxWait: -1},
		{MaxInFlight: 4, RetryAfter: -time.Second},
	} {
		g, err := New(cfg)
		if err == nil {
			t.Errorf("New(%+v) = %v, nil; want an error", cfg, g)
			continue
		}
		// In words, as the other packages' option errors are: the
		// configuration file's users read them too.
		if camel := regexp.MustCompile(`\b[A-Z][a-z]+[A-Z]\w*`).FindString(err.Error()); camel != "" {
			t.Errorf("New(%+v): %v: names the Go field %s", cfg, err, camel)
		}
	}
	g := newGate(t, Config{MaxInFlight: 1})
	if got := g.Config().RetryAfter; got != DefaultRetryAfter {
		t.Errorf("Config().RetryAfter = %v, want %v", got, DefaultRetryAfter)
	}
}

// TestReserve: four slots, one kept for critical work and one more that
// sheddable work may not take. No queue.
func TestReserve(t *testing.T) {
	d := drive(t, Config{MaxInFlight: 4, Reserve: Reserve{Critical: 1, Default: 1}})
	shed, def, crit := Request{Priority: Sheddable}, Request{Priority: Default}, Request{Priority: Critical}
	d.arrive(0, "s1", shed, Running, 0)
	d.arrive(0, "s2", shed, Running, 0)
	d.arrive(0, "s3", shed, Refused, Full) // 2 = 4 − 1 − 1 running
	d.arrive(0, "d1", def, Running, 0)
	d.arrive(0, "d2", def, Refused, Full) // 3 = 4 − 1 running
	d.arrive(0, "c1", crit, Running, 0)
	d.arrive(0, "c2", crit, Refused, Full)
	d.done(10, "s1")
	d.arrive(10, "s4", shed, Refused, Full) // 3 still run: above the sheddable limit
	d.arrive(10, "d3", def, Refused, Full)  // and at the default one
	d.arrive(10, "c3", crit, Running, 0)
	if s := d.g.Stats(); s.InFlight != 4 || s.Started != 5 || s.Finished != 1 || s.Refused[Full] != 5 {
		t.Errorf("Stats = %+v", s)
	}
}

// TestOrders: one slot and two places. Wine keeps the oldest and serves it
// first; milk keeps the newest and serves it first.
func TestOrders(t *testing.T) {
	t.Run("fifo", func(t *testing.T) {
		d := drive(t, Config{MaxInFlight: 1, QueueSize: 2, Order: FIFO})
		d.arrive(0, "a", Request{}, Running, 0)
		d.arrive(1, "b", Request{}, Waiting, 0)
		d.arrive(2, "c", Request{}, Waiting, 0)
		d.arrive(3, "d", Request{}, Refused, Full) // the newcomer goes
		d.done(10, "a", "b=running")
		d.arrive(11, "e", Request{}, Waiting, 0)
		d.done(20, "b", "c=running")
		d.done(30, "c", "e=running")
	})
	t.Run("lifo", func(t *testing.T) {
		d := drive(t, Config{MaxInFlight: 1, QueueSize: 2, Order: LIFO})
		d.arrive(0, "a", Request{}, Running, 0)
		d.arrive(1, "b", Request{}, Waiting, 0)
		d.arrive(2, "c", Request{}, Waiting, 0)
		d.arrive(3, "d", Request{}, Waiting, 0, "b=refused") // the oldest goes
		d.state("b", Refused, Evicted)
		d.done(10, "a", "d=running")
		d.arrive(11, "e", Request{}, Waiting, 0)
		d.done(20, "d", "e=running")
		d.done(30, "e", "c=running")
	})
}

// TestDeadline: a waiter leaves the queue the moment its deadline minus the
// expected run time comes, and a request that would reach that moment
// before its turn is refused at once.
func TestDeadline(t *testing.T) {
	d := drive(t, Config{MaxInFlight: 1, QueueSize: 5, ServiceTime: ms(100)})
	d.arrive(0, "a", Request{}, Running, 0)
	// b's answer is due at 250 ms; it runs 100 ms, so it must start by
	// 150 ms. Its expected turn is when a ends: 0 + 100 ms·(0+1)/1.
	d.arrive(0, "b", Request{Deadline: at(250)}, Waiting, 0)
	// c would start after b, at 200 ms, past its 150 ms: refused now.
	d.arrive(0, "c", Request{Deadline: at(250)}, Refused, Late)
	// e has until 400 ms, starting by 300 ms: its turn at 200 ms is fine.
	d.arrive(0, "e", Request{Deadline: at(400)}, Waiting, 0)
	d.arrive(0, "f", Request{Deadline: at(0)}, Refused, Late) // already due
	d.expire(149)
	d.expire(150, "b=refused")
	d.state("b", Refused, Late)
	d.done(160, "a", "e=running")
	// a ran 160 ms: the estimate moves an eighth of the way, to 107.5 ms.
	if got, want := d.g.Stats().RunTime, ms(100)+ms(60)/8; got != want {
		t.Errorf("RunTime = %v, want %v", got, want)
	}
}

// TestDeadlineNoSlot: a request already due is refused even with a free
// slot; one merely short of time still runs when a slot is free (the
// estimate is only an estimate).
func TestDeadlineNoSlot(t *testing.T) {
	d := drive(t, Config{MaxInFlight: 2, ServiceTime: ms(100)})
	d.arrive(0, "a", Request{Deadline: at(50)}, Running, 0)
	d.arrive(0, "b", Request{Deadline: at(0)}, Refused, Late)
}

func TestMaxWait(t *testing.T) {
	d := drive(t, Config{MaxInFlight: 1, QueueSize: 5, MaxWait: ms(50)})
	d.arrive(0, "a", Request{}, Running, 0)
	d.arrive(10, "b", Request{}, Waiting, 0)
	d.arrive(20, "c", Request{Deadline: at(40)}, Waiting, 0) // its deadline comes first
	if next, ok := d.g.NextExpiry(); !ok || !next.Equal(at(40)) {
		t.Errorf("NextExpiry = %v, %v; want 40ms, true", next, ok)
	}
	d.expire(40, "c=refused")
	d.expire(59)
	d.arrive(60, "e", Request{}, Waiting, 0, "b=refused") // Arrive expires b first
	d.state("b", Refused, Late)
}

// TestPriorityQueue: the highest class waiting is served first, and a full
// queue sheds its lowest class to let a more important request in.
func TestPriorityQueue(t *testing.T) {
	d := drive(t, Config{MaxInFlight: 1, QueueSize: 2})
	d.arrive(0, "a", Request{}, Running, 0)
	d.arrive(1, "s", Request{Priority: Sheddable}, Waiting, 0)
	d.arrive(2, "d", Request{}, Waiting, 0)
	d.arrive(3, "c", Request{Priority: Critical}, Waiting, 0, "s=refused")
	d.state("s", Refused, Evicted)
	d.arrive(4, "s2", Request{Priority: Sheddable}, Refused, Full) // the lowest class is its own
	d.arrive(5, "d2", Request{}, Refused, Full)                    // FIFO: the newcomer of the lowest class
	d.done(10, "a", "c=running")
	d.done(20, "c", "d=running")
}

// TestHealth: sheddable work is refused while the queue stands longer than
// its target, or while the run time is above its target; other classes are
// not.
func TestHealth(t *testing.T) {
	t.Run("queue delay", func(t *testing.T) {
		d := drive(t, Config{MaxInFlight: 1, QueueSize: 10, QueueDelayTarget: ms(100)})
		d.arrive(0, "a", Request{}, Running, 0)
		d.arrive(0, "b", Request{}, Waiting, 0)
		d.arrive(100, "s1", Request{Priority: Sheddable}, Waiting, 0) // b waited 100 ms: not more
		d.arrive(101, "s2", Request{Priority: Sheddable}, Refused, Unhealthy)
		d.arrive(101, "c", Request{}, Waiting, 0)
		d.done(102, "a", "b=running")
		d.arrive(103, "s3", Request{Priority: Sheddable}, Waiting, 0) // the oldest now waited 3 ms
	})
	t.Run("latency", func(t *testing.T) {
		d := drive(t, Config{MaxInFlight: 4, LatencyTarget: ms(200)})
		d.arrive(0, "a", Request{}, Running, 0)
		d.arrive(0, "s1", Request{Priority: Sheddable}, Running, 0)
		d.done(300, "a") // the first run time measured: 300 ms
		d.arrive(300, "s2", Request{Priority: Sheddable}, Refused, Unhealthy)
		d.arrive(300, "b", Request{}, Running, 0)
	})
}

// TestFair: one slot, three places. A newcomer from a light tenant pushes
// out the heaviest tenant's newest waiter; a newcomer from the heaviest
// tenant is refused.
func TestFair(t *testing.T) {
	big, small, other := Request{Tenant: "big"}, Request{Tenant: "small"}, Request{Tenant: "other"}
	t.Run("fifo", func(t *testing.T) {
		d := drive(t, Config{MaxInFlight: 1, QueueSize: 3, Shedding: Fair})
		d.arrive(0, "b0", big, Running, 0)
		d.arrive(1, "b1", big, Waiting, 0)
		d.arrive(2, "b2", big, Waiting, 0)
		d.arrive(3, "b3", big, Waiting, 0)
		d.arrive(4, "s1", small, Waiting, 0, "b3=refused") // big holds 4, small 1
		d.state("b3", Refused, Evicted)
		d.arrive(5, "b4", big, Refused, Full) // big would hold 4 again: it is the heaviest
		d.arrive(6, "o1", other, Waiting, 0, "b2=refused")
		// big 2 (b0 running, b1 waiting), small 1, other 1: another small
		// one would make small 2, not lighter than big.
		d.arrive(7, "s2", small, Refused, Full)
		d.done(10, "b0", "b1=running")
		d.done(20, "b1", "s1=running")
		d.done(30, "s1", "o1=running")
		d.done(40, "o1")
		if n := len(d.g.tenants); n != 0 {
			t.Errorf("%d tenants kept with nothing in the gate", n)
		}
	})
	t.Run("lifo", func(t *testing.T) {
		d := drive(t, Config{MaxInFlight: 1, QueueSize: 3, Shedding: Fair, Order: LIFO})
		d.arrive(0, "b0", big, Running, 0)
		d.arrive(1, "b1", big, Waiting, 0)
		d.arrive(2, "b2", big, Waiting, 0)
		d.arrive(3, "s1", small, Waiting, 0)
		d.arrive(4, "s2", small, Waiting, 0, "b1=refused") // big's oldest goes
		// big 2, small 2: a newcomer from small is as heavy as big, so small
		// gives up its own oldest waiter.
		d.arrive(5, "s3", small, Waiting, 0, "s1=refused")
		d.done(10, "b0", "s3=running")
	})
	// One request per tenant, as in a flood from many addresses: no tenant
	// is heavier, and the drop order decides.
	for _, tc := range []struct {
		order   Order
		state   State
		changed []string
	}{{FIFO, Refused, nil}, {LIFO, Waiting, []string{"a=refused"}}} {
		t.Run("ties "+tc.order.String(), func(t *testing.T) {
			d := drive(t, Config{MaxInFlight: 1, QueueSize: 2, Shedding: Fair, Order: tc.order})
			d.arrive(0, "x", Request{Tenant: "x"}, Running, 0)
			d.arrive(1, "a", Request{Tenant: "a"}, Waiting, 0)
			d.arrive(2, "b", Request{Tenant: "b"}, Waiting, 0)
			reason := Reason(0)
			if tc.state == Refused {
				reason = Full
			}
			d.arrive(3, "c", Request{Tenant: "c"}, tc.state, reason, tc.changed...)
		})
	}
}

// TestRandom: the victim of a full queue is drawn among the waiters and the
// newcomer, each about equally often.
func TestRandom(t *testing.T) {
	g := newGate(t, Config{MaxInFlight: 1, QueueSize: 2, Shedding: Random, Rand: rand.New(rand.NewPCG(1, 2))})
	running, _ := g.Arrive(t0, Request{}, nil)
	counts := map[string]int{}
	const rounds = 3000
	for i := range rounds {
		now := at(i)
		a, _ := g.Arrive(now, Request{}, nil)
		b, _ := g.Arrive(now, Request{}, nil)
		c, changed := g.Arrive(now, Request{}, nil)
		switch {
		case c.State() == Refused && len(changed) == 0:
			counts["newcomer"]++
		case len(changed) == 1 && changed[0] == a && a.Reason() == Evicted:
			counts["oldest"]++
		case len(changed) == 1 && changed[0] == b && b.Reason() == Evicted:
			counts["middle"]++
		default:
			t.Fatalf("round %d: states %v %v %v, changed %d", i, a.State(), b.State(), c.State(), len(changed))
		}
		if err := g.check(); err != nil {
			t.Fatal(err)
		}
		for _, tk := range []*Ticket{a, b, c} {
			g.Cancel(now, tk, nil)
		}
	}
	for _, k := range []string{"newcomer", "oldest", "middle"} {
		if n := counts[k]; n < rounds/3-150 || n > rounds/3+150 {
			t.Errorf("the %s was the victim %d times of %d, want about a third", k, n, rounds)
		}
	}
	g.Done(at(rounds), running, nil)
}

func TestCancel(t *testing.T) {
	d := drive(t, Config{MaxInFlight: 1, QueueSize: 2, Shedding: Fair})
	d.arrive(0, "a", Request{Tenant: "x"}, Running, 0)
	d.arrive(0, "b", Request{Tenant: "y", Deadline: at(100)}, Waiting, 0)
	d.arrive(0, "c", Request{Tenant: "y"}, Waiting, 0)
	if ch := d.g.Cancel(at(5), d.tickets["b"], nil); len(ch) != 0 {
		t.Errorf("Cancel(waiting b) changed %d tickets", len(ch))
	}
	d.state("b", Canceled, 0)
	d.check()
	// Cancelling the running ticket frees its slot without counting its
	// run time.
	if ch := d.g.Cancel(at(6), d.tickets["a"], nil); len(ch) != 1 || ch[0] != d.tickets["c"] {
		t.Errorf("Cancel(running a) changed %v, want c", ch)
	}
	d.check()
	d.done(7, "a") // a second end does nothing
	if s := d.g.Stats(); s.Canceled != 1 || s.Finished != 1 || s.RunTime != 0 || s.InFlight != 1 {
		t.Errorf("Stats = %+v", s)
	}
}

// TestRandomOperations drives gates of every kind with random arrivals,
// ends, cancellations and expiries, and checks the invariants after each.
func TestRandomOperations(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 99))
		cfg := Config{
			MaxInFlight: 1 + r.IntN(5),
			QueueSize:   r.IntN(6),
			Order:       Order(r.IntN(2)),
			Shedding:    Shedding(r.IntN(3)),
			Rand:        rand.New(rand.NewPCG(seed, 7)),
		}
		if cfg.MaxInFlight > 2 {
			cfg.Reserve = Reserve{Critical: 1, Default: r.IntN(cfg.MaxInFlight - 2)}
		}
		if r.IntN(2) == 0 {
			cfg.ServiceTime = ms(1 + r.IntN(20))
			cfg.MaxWait = ms(r.IntN(50))
		}
		if r.IntN(3) == 0 {
			cfg.QueueDelayTarget, cfg.LatencyTarget = ms(10), ms(15)
		}
		g := newGate(t, cfg)
		var running, waiting []*Ticket
		now := t0
		for step := range 2000 {
			now = now.Add(time.Duration(r.IntN(3000)) * time.Microsecond)
			var changed []*Ticket
			switch op := r.IntN(10); {
			case op < 5:
				req := Request{Priority: Priority(r.IntN(3) - 1), Tenant: fmt.Sprint(r.IntN(4))}
				if r.IntN(2) == 0 {
					req.Deadline = now.Add(ms(r.IntN(60)))
				}
				var tk *Ticket
				tk, changed = g.Arrive(now, req, nil)
				switch tk.State() {
				case Running:
					running = append(running, tk)
				case Waiting:
					waiting = append(waiting, tk)
				}
			case op < 8 && len(running) > 0:
				i := r.IntN(len(running))
				changed = g.Done(now, running[i], nil)
			case op < 9 && len(waiting) > 0:
				i := r.IntN(len(waiting))
				changed = g.Cancel(now, waiting[i], nil)
			default:
				changed = g.Expire(now, nil)
			}
			for _, tk := range changed {
				if tk.State() == Running {
					running = append(running, tk)
				}
			}
			running = keep(running, Running)
			waiting = keep(waiting, Waiting)
			if err := g.check(); err != nil {
				t.Fatalf("seed %d step %d (%+v): %v", seed, step, cfg, err)
			}
			if s := g.Stats(); s.InFlight != len(running) || s.Waiting != len(waiting) {
				t.Fatalf("seed %d step %d: Stats in flight %d waiting %d, tickets say %d and %d", seed, step, s.InFlight, s.Waiting, len(running), len(waiting))
			}
		}
	}
}

func keep(ts []*Ticket, s State) []*Ticket {
	out := ts[:0]
	for _, t := range ts {
		if t.State() == s {
			out = append(out, t)
		}
	}
	return out
}

// TestAcquireConcurrent: many goroutines acquire and release on the wall
// clock at once, some waiting, some pushed out, some timing out; under
// -race this checks that no ticket is read outside the lock while another
// goroutine may change it, and at the end every slot is back.
func TestAcquireConcurrent(t *testing.T) {
	g := newGate(t, Config{MaxInFlight: 4, QueueSize: 8, Order: LIFO, Shedding: Fair, MaxWait: time.Millisecond})
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := range 100 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%3)*time.Millisecond)
				tk, err := g.Acquire(ctx, Request{Tenant: fmt.Sprint(w % 5), Priority: Priority(i%3 - 1)})
				cancel()
				if err == nil {
					g.Release(tk)
				}
			}
		})
	}
	wg.Wait()
	s := g.Stats()
	if s.InFlight != 0 || s.Waiting != 0 || s.Started != s.Finished || s.Started == 0 {
		t.Errorf("after the storm: %+v", s)
	}
	if err := g.check(); err != nil {
		t.Error(err)
	}
}

// TestAcquireAdmittedByAnother: a waiter admitted by another goroutine's
// Release. Acquire must read its ticket's state only under the lock or
// after its wake-up, which is what -race checks here: no synctest bubble,
// whose Wait would order the goroutines and hide a racy read.
func TestAcquireAdmittedByAnother(t *testing.T) {
	g := newGate(t, Config{MaxInFlight: 1, QueueSize: 1})
	a, err := g.Acquire(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		tk, err := g.Acquire(context.Background(), Request{})
		if err == nil && tk.State() != Running {
			err = fmt.Errorf("Acquire returned a %v ticket", tk.State())
		}
		g.Release(tk)
		got <- err
	}()
	for g.Stats().Waiting == 0 {
		runtime.Gosched()
	}
	g.Release(a)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
