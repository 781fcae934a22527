package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/portero-rl/portero"
)

// RunLeases runs the conformance suite of concurrency leases against the
// stores newStore returns, one fresh store per subtest (the constructor
// arranges for it to be closed). It checks:
//
//   - step tables worked by hand: slots taken and given back, leases that
//     expire exactly at their TTL unless renewed, a renewal that comes too
//     late, time that goes backwards, a rule whose Max changes;
//   - seeded random traces of acquisitions, renewals and releases on several
//     keys and rules, every answer equal to LeaseReference's;
//   - many concurrent acquisitions at one instant: exactly Max succeed;
//   - invalid rules (ErrInvalidLimit) and harmless double releases.
//
// Instants are whole microseconds after Base and lifetimes whole
// milliseconds, so that a store that keeps time in microseconds (Redis)
// passes unchanged. A store that reads its own clock must be put in a mode
// that takes the caller's instant (redisstore.CallerClock).
func RunLeases(t *testing.T, newStore func(t *testing.T) portero.LeaseStore) {
	t.Helper()
	t.Run("steps", func(t *testing.T) {
		for _, tab := range LeaseTables() {
			t.Run(tab.Name, func(t *testing.T) { RunLeaseTable(t, newStore(t), tab) })
		}
	})
	t.Run("random", func(t *testing.T) { runLeaseRandom(t, newStore) })
	t.Run("concurrent", func(t *testing.T) { runLeaseConcurrent(t, newStore(t)) })
	t.Run("errors", func(t *testing.T) { runLeaseErrors(t, newStore(t)) })
}

// LeaseOp is what a LeaseStep does.
type LeaseOp int

// The operations of a lease step.
const (
	Acquire LeaseOp = iota
	Renew
	Release
)

func (o LeaseOp) String() string {
	return [...]string{"acquire", "renew", "release"}[o]
}

// LeaseStep is one operation of a lease table, at At after Base, on Key
// ("k" when empty). Lease names the lease: an allowed Acquire keeps it under
// that name, and Renew and Release act on the lease of that name. Max, when
// not zero, replaces the table's rule.Max for this step (a reloaded rule).
// An Acquire expects Allowed, Remaining and RetryAfter; a Renew expects
// ErrLeaseLost when Lost, no error otherwise.
type LeaseStep struct {
	At         time.Duration
	Op         LeaseOp
	Key        string
	Lease      string
	Max        int64
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	Lost       bool
	Note       string
}

// LeaseTable is a step table for one concurrency rule.
type LeaseTable struct {
	Name  string
	Rule  portero.ConcurrencyRule
	Steps []LeaseStep
}

// LeaseTables returns the step tables of RunLeases, worked by hand (see
// each step's Note).
func LeaseTables() []LeaseTable {
	c2 := portero.ConcurrencyRule{Name: "c2", Max: 2, TTL: 10 * time.Second}
	return []LeaseTable{
		{
			Name: "two slots: the third waits for a release",
			Rule: c2,
			Steps: []LeaseStep{
				{At: 0, Lease: "a", Allowed: true, Remaining: 1},
				{At: 0, Lease: "b", Allowed: true, Remaining: 0},
				{At: sec(1), Lease: "c", RetryAfter: sec(9), Note: "full; a and b expire at 10 s if no one renews them"},
				{At: sec(2), Op: Release, Lease: "a"},
				{At: sec(2), Lease: "c", Allowed: true, Remaining: 0, Note: "a's slot"},
				{At: sec(2), Op: Release, Lease: "a", Note: "a second release is harmless"},
				{At: sec(3), Lease: "d", RetryAfter: sec(7), Note: "b, the earliest, expires at 10 s"},
				{At: sec(3), Key: "other", Lease: "e", Allowed: true, Remaining: 1, Note: "keys are independent"},
				{At: sec(3), Op: Renew, Lease: "a", Lost: true, Note: "a released lease cannot be renewed"},
				{At: sec(4), Op: Release, Lease: "b"},
				{At: sec(4), Op: Release, Lease: "c"},
				{At: sec(4), Lease: "f", Allowed: true, Remaining: 1, Note: "all given back"},
			},
		},
		{
			Name: "a lease expires exactly at its TTL unless renewed",
			Rule: c2,
			Steps: []LeaseStep{
				{At: 0, Lease: "a", Allowed: true, Remaining: 1},
				{At: 0, Lease: "b", Allowed: true, Remaining: 0},
				{At: sec(6), Op: Renew, Lease: "a", Note: "a now expires at 16 s"},
				{At: sec(10) - time.Microsecond, Lease: "c", RetryAfter: time.Microsecond, Note: "b expires 1 µs later"},
				{At: sec(10), Lease: "c", Allowed: true, Remaining: 0, Note: "b expired at exactly 10 s: its holder stopped renewing"},
				{At: sec(10), Op: Renew, Lease: "b", Lost: true, Note: "too late: b's slot is c's now"},
				{At: sec(12), Op: Renew, Lease: "a", Note: "a to 22 s"},
				{At: sec(15), Lease: "d", RetryAfter: sec(5), Note: "c expires at 20 s, before a at 22 s"},
				{At: sec(22), Op: Renew, Lease: "a", Lost: true, Note: "an expiry at or before now has expired"},
				{At: sec(22), Lease: "d", Allowed: true, Remaining: 1, Note: "c and a have both expired"},
			},
		},
		{
			Name: "time that goes backwards creates no slot and shortens no lease",
			Rule: c2,
			Steps: []LeaseStep{
				{At: sec(10), Lease: "a", Allowed: true, Remaining: 1},
				{At: sec(10), Lease: "b", Allowed: true, Remaining: 0},
				{At: sec(5), Lease: "c", RetryAfter: sec(15), Note: "both expire at 20 s, 15 s after the caller's 5 s"},
				{At: sec(5), Op: Renew, Lease: "a", Note: "5 s + 10 s is earlier than 20 s: a keeps 20 s"},
				{At: sec(19), Lease: "c", RetryAfter: sec(1)},
				{At: sec(20), Lease: "c", Allowed: true, Remaining: 1},
			},
		},
		{
			Name: "a rule whose max changes keeps the leases held",
			Rule: portero.ConcurrencyRule{Name: "c3", Max: 3, TTL: 10 * time.Second},
			Steps: []LeaseStep{
				{At: 0, Lease: "a", Allowed: true, Remaining: 2},
				{At: 0, Lease: "b", Allowed: true, Remaining: 1},
				{At: 0, Lease: "c", Allowed: true, Remaining: 0},
				{At: sec(1), Max: 2, Lease: "d", RetryAfter: sec(9), Note: "lowered to 2 with 3 held"},
				{At: sec(1), Op: Release, Lease: "a"},
				{At: sec(1), Max: 2, Lease: "d", RetryAfter: sec(9), Note: "2 held, still not below 2"},
				{At: sec(1), Op: Release, Lease: "b"},
				{At: sec(1), Max: 2, Lease: "d", Allowed: true, Remaining: 0},
				{At: sec(1), Max: 5, Lease: "e", Allowed: true, Remaining: 2, Note: "raised to 5 with 2 held"},
			},
		},
		{
			Name: "one slot, a lease of 1.5 s",
			Rule: portero.ConcurrencyRule{Name: "c1", Max: 1, TTL: 1500 * time.Millisecond},
			Steps: []LeaseStep{
				{At: 0, Lease: "a", Allowed: true, Remaining: 0},
				{At: ms(1000), Op: Renew, Lease: "a", Note: "to 2.5 s"},
				{At: ms(2000), Lease: "b", RetryAfter: ms(500)},
				{At: ms(2500), Lease: "b", Allowed: true, Remaining: 0},
				{At: ms(2500), Op: Release, Lease: "a", Note: "an expired lease's release is harmless and frees nothing"},
				{At: ms(2500), Lease: "c", RetryAfter: ms(1500)},
			},
		},
	}
}

// RunLeaseTable runs one table against s.
func RunLeaseTable(t *testing.T, s portero.LeaseStore, tab LeaseTable) {
	t.Helper()
	ctx := context.Background()
	leases := map[string]portero.Lease{}
	for i, st := range tab.Steps {
		key, rule := cmp.Or(st.Key, "k"), tab.Rule
		rule.Max = cmp.Or(st.Max, rule.Max)
		at := Base.Add(st.At)
		where := fmt.Sprintf("step %d (%v at %v, lease %q; %s)", i, st.Op, st.At, st.Lease, st.Note)
		held := leases[st.Lease]
		if st.Op != Acquire && held == nil {
			t.Fatalf("%s: no lease %q", where, st.Lease)
		}
		switch st.Op {
		case Acquire:
			l, d, err := s.Acquire(ctx, at, rule, key)
			if err != nil {
				t.Fatalf("%s: Acquire = %v", where, err)
			}
			want := portero.Decision{Allowed: st.Allowed, Limit: rule.Max, Remaining: st.Remaining, RetryAfter: st.RetryAfter}
			if d != want {
				t.Errorf("%s: Acquire = %+v, want %+v", where, d, want)
			}
			if (l != nil) != d.Allowed {
				t.Errorf("%s: Acquire returned lease %v with Allowed %v", where, l, d.Allowed)
			}
			if l != nil {
				leases[st.Lease] = l
			}
		case Renew:
			err := held.Renew(ctx, at)
			if st.Lost && !errors.Is(err, portero.ErrLeaseLost) || !st.Lost && err != nil {
				t.Errorf("%s: Renew = %v, want lost %v", where, err, st.Lost)
			}
		case Release:
			if err := held.Release(ctx); err != nil {
				t.Errorf("%s: Release = %v", where, err)
			}
		}
	}
}

// runLeaseRandom compares seeded random traces with LeaseReference.
func runLeaseRandom(t *testing.T, newStore func(t *testing.T) portero.LeaseStore) {
	rules := []portero.ConcurrencyRule{
		{Name: "r3", Max: 3, TTL: 5 * time.Second},
		{Name: "r1", Max: 1, TTL: 2 * time.Second},
	}
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			ctx := context.Background()
			s, ref := newStore(t), NewLeaseReference()
			rng := rand.New(rand.NewPCG(seed, 13))
			type pair struct{ got, want portero.Lease }
			var held []pair
			at := time.Duration(0)
			for i := range 600 {
				if rng.IntN(20) == 0 {
					at -= time.Duration(rng.IntN(3_000_000)) * time.Microsecond // a clock step back
				} else {
					at += time.Duration(rng.IntN(1_500_000)) * time.Microsecond
				}
				now := Base.Add(at)
				switch op := rng.IntN(4); {
				case op <= 1 || len(held) == 0:
					rule, key := rules[rng.IntN(len(rules))], fmt.Sprint("k", rng.IntN(3))
					gl, gd, gerr := s.Acquire(ctx, now, rule, key)
					wl, wd, werr := ref.Acquire(ctx, now, rule, key)
					if gerr != nil || werr != nil || gd != wd || (gl == nil) != (wl == nil) {
						t.Fatalf("op %d at %v: Acquire(%s, %s) = %+v, %v; reference %+v, %v", i, at, rule.Name, key, gd, gerr, wd, werr)
					}
					if gl != nil {
						held = append(held, pair{gl, wl})
					}
				case op == 2:
					p := held[rng.IntN(len(held))]
					gerr, werr := p.got.Renew(ctx, now), p.want.Renew(ctx, now)
					if errors.Is(gerr, portero.ErrLeaseLost) != errors.Is(werr, portero.ErrLeaseLost) || (gerr != nil && !errors.Is(gerr, portero.ErrLeaseLost)) {
						t.Fatalf("op %d at %v: Renew = %v; reference %v", i, at, gerr, werr)
					}
				default:
					j := rng.IntN(len(held))
					if err := held[j].got.Release(ctx); err != nil {
						t.Fatalf("op %d: Release = %v", i, err)
					}
					held[j].want.Release(ctx)
					if rng.IntN(4) != 0 { // sometimes keep it, to release or renew again
						held = append(held[:j], held[j+1:]...)
					}
				}
			}
		})
	}
}

// runLeaseConcurrent: 40 acquisitions of a rule of 5 at one instant, at
// once; exactly 5 pass, and once they are released 5 pass again.
func runLeaseConcurrent(t *testing.T, s portero.LeaseStore) {
	ctx := context.Background()
	rule := portero.ConcurrencyRule{Name: "conc", Max: 5, TTL: 30 * time.Second}
	for round := range 2 {
		var mu sync.Mutex
		var got []portero.Lease
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				l, d, err := s.Acquire(ctx, Base.Add(time.Duration(round)*time.Second), rule, "k")
				if err != nil {
					t.Errorf("Acquire = %v", err)
					return
				}
				if d.Allowed {
					mu.Lock()
					got = append(got, l)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(got) != 5 {
			t.Errorf("round %d: %d of 40 concurrent acquisitions passed, want 5", round, len(got))
		}
		for _, l := range got {
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release = %v", err)
			}
		}
	}
}

func runLeaseErrors(t *testing.T, s portero.LeaseStore) {
	ctx := context.Background()
	for _, r := range []portero.ConcurrencyRule{
		{Max: 1},
		{Name: "zero", Max: 0},
		{Name: "negative", Max: -1},
		{Name: "short", Max: 1, TTL: 500 * time.Microsecond},
		{Name: "backwards", Max: 1, TTL: -time.Second},
	} {
		if l, _, err := s.Acquire(ctx, Base, r, "k"); !errors.Is(err, portero.ErrInvalidLimit) || l != nil {
			t.Errorf("Acquire(%+v) = %v, %v; want ErrInvalidLimit and no lease", r, l, err)
		}
	}
	l, d, err := s.Acquire(ctx, Base, portero.ConcurrencyRule{Name: "default-ttl", Max: 1}, "k")
	if err != nil || !d.Allowed {
		t.Fatalf("Acquire with the default TTL = %+v, %v", d, err)
	}
	if _, d, _ := s.Acquire(ctx, Base.Add(portero.DefaultLeaseTTL-time.Microsecond), portero.ConcurrencyRule{Name: "default-ttl", Max: 1}, "k"); d.Allowed || d.RetryAfter != time.Microsecond {
		t.Errorf("just before DefaultLeaseTTL: %+v, want refused for 1 µs more", d)
	}
	for range 2 {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release = %v", err)
		}
	}
}

// LeaseReference is the plainest correct portero.LeaseStore, the oracle
// of RunLeases: one mutex over a list of (id, expiry) per rule name and key,
// every expired lease dropped by a filter at each Acquire. It is written
// independently of algorithm.Leases, which the memory store uses, so that
// the random traces compare two implementations. Safe for concurrent use;
// it starts no goroutines and never forgets a key.
type LeaseReference struct {
	mu   sync.Mutex
	next int
	sets map[refKey][]refLease
}

type refLease struct {
	id  string
	exp int64
}

// NewLeaseReference returns an empty LeaseReference.
func NewLeaseReference() *LeaseReference { return &LeaseReference{sets: map[refKey][]refLease{}} }

var _ portero.LeaseStore = (*LeaseReference)(nil)

// Acquire implements portero.LeaseStore.
func (r *LeaseReference) Acquire(_ context.Context, now time.Time, rule portero.ConcurrencyRule, key string) (portero.Lease, portero.Decision, error) {
	if err := rule.Validate(); err != nil {
		return nil, portero.Decision{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := refKey{portero.Rule{Name: rule.Name}, key}
	ns := now.UnixNano()
	var live []refLease
	for _, l := range r.sets[k] {
		if l.exp > ns {
			live = append(live, l)
		}
	}
	r.sets[k] = live
	if int64(len(live)) >= rule.Max {
		earliest := live[0].exp
		for _, l := range live {
			earliest = min(earliest, l.exp)
		}
		return nil, portero.Decision{Limit: rule.Max, RetryAfter: time.Duration(earliest - ns)}, nil
	}
	r.next++
	l := refLease{id: strconv.Itoa(r.next), exp: ns + int64(rule.LeaseTTL())}
	r.sets[k] = append(live, l)
	return &refHandle{r: r, k: k, id: l.id, ttl: rule.LeaseTTL()}, portero.Decision{Allowed: true, Limit: rule.Max, Remaining: rule.Max - int64(len(live)) - 1}, nil
}

type refHandle struct {
	r   *LeaseReference
	k   refKey
	id  string
	ttl time.Duration
}

func (h *refHandle) Renew(_ context.Context, now time.Time) error {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	set := h.r.sets[h.k]
	for i, l := range set {
		if l.id != h.id {
			continue
		}
		if l.exp <= now.UnixNano() {
			h.r.sets[h.k] = append(set[:i:i], set[i+1:]...)
			break
		}
		set[i].exp = max(l.exp, now.UnixNano()+int64(h.ttl))
		return nil
	}
	return fmt.Errorf("storetest: lease %s: %w", h.id, portero.ErrLeaseLost)
}

func (h *refHandle) Release(context.Context) error {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	set := h.r.sets[h.k]
	for i, l := range set {
		if l.id == h.id {
			h.r.sets[h.k] = append(set[:i:i], set[i+1:]...)
			break
		}
	}
	return nil
}
