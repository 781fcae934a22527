package algorithm_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// look is Look over k without changing it (the log is cloned).
func (k *keyed) look(key string, now, cost int64) portero.Decision {
	if k.log != nil {
		l := new(algorithm.Log)
		if old := k.logs[key]; old != nil {
			l = old.Clone()
		}
		return k.log.Look(l, now, cost)
	}
	s, found := k.states[key]
	return algorithm.Look(k.dec, s, found, now, cost)
}

// TestLook: Look tells what the request would get — the decision Decide
// then makes, field for field — with what stands now: the Remaining the
// admitted request leaves is Look's less its cost, and Look's ResetAfter is
// when the whole limit is back if nothing else comes (a request of the
// rule's largest cost passes then, and not 1 ns before), for every
// algorithm, the calendar quota among them, at costs up to the largest.
func TestLook(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	quota, err := portero.ParseQuota("20/day")
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range portero.Algorithms {
		limits := randomLimits
		if alg == portero.FixedWindow {
			limits = append(limits[:len(limits):len(limits)], quota)
		}
		for _, l := range limits {
			k := newKeyed(t, alg, l)
			most := k.maxCost()
			keys, at, costs := randomTrace(r, 300, most, 3*max(l.Window, quotaSpan(l)))
			admitted := 0
			for i := range keys {
				key, now, cost := keys[i], at[i], costs[i]
				lk := k.look(key, now, cost)
				full := now + int64(lk.ResetAfter)
				if !k.look(key, full, most).Allowed || lk.ResetAfter > 0 && k.look(key, full-1, most).Allowed {
					t.Fatalf("%s %v request %d: Look says whole again in %v, wrong", alg, l, i, lk.ResetAfter)
				}
				d := k.decide(key, now, cost)
				want := lk
				if d.Allowed {
					admitted++
					want.Remaining, want.ResetAfter = lk.Remaining-cost, d.ResetAfter
				}
				if d != want {
					t.Fatalf("%s %v request %d (cost %d): Look %+v, then Decide %+v", alg, l, i, cost, lk, d)
				}
			}
			if admitted == 0 || admitted == len(keys) {
				t.Errorf("%s %v: %d of %d admitted: a weak trace", alg, l, admitted, len(keys))
			}
		}
	}
}

// quotaSpan is a calendar quota's period (a day at most here), 0 for others.
func quotaSpan(l portero.Limit) (d time.Duration) {
	if l.IsCalendar() {
		return 24 * time.Hour
	}
	return 0
}
