package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/storetest"
)

// checkTrace decides a random trace through the engine over a Reference
// store and replays what the verdicts say was counted on a second
// Reference (the model): after every request both stores must hold the
// same state for every rule and key. So a refused request counts nothing,
// a shadow refusal changes nothing for the enforced rules, check-only and
// can-never-pass hits count nothing, and an allowed request counts exactly
// its counted hits. Each verdict must also be consistent with itself.
func checkTrace(t *testing.T, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	var rules []*engine.Rule
	for i, a := range portero.Algorithms {
		lim := portero.Limit{Count: 1 + r.Int64N(5), Window: time.Duration(1+r.IntN(3)) * time.Second}
		if r.IntN(3) == 0 {
			lim.Burst = 1 + r.Int64N(6)
		}
		er, err := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: fmt.Sprint("r", i), Algorithm: a, Limit: lim}, Shadow: r.IntN(4) == 0})
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, er)
	}
	blocked, _ := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "blocked", Algorithm: portero.FixedWindow, Limit: portero.Limit{Window: time.Second}}})
	rules = append(rules, blocked)
	keys := []string{"a", "b"}
	st, model := storetest.NewReference(), storetest.NewReference()
	e := newEngine(t, st, engine.Options{})
	ctx := context.Background()
	var at time.Duration
	v := new(engine.Verdict)
	for step := range steps {
		at += time.Duration(r.IntN(700)) * time.Millisecond
		now := t0.Add(at)
		hits := make([]engine.Hit, 1+r.IntN(3))
		for i := range hits {
			rule := rules[r.IntN(len(rules))]
			h := engine.Hit{Rule: rule, Key: keys[r.IntN(len(keys))], Cost: 1 + r.Int64N(max(rule.MaxCost(), 1)+2)}
			if r.IntN(6) == 0 {
				h.CheckOnly, h.Cost = true, 0
			}
			hits[i] = h
		}
		if err := e.Decide(ctx, now, hits, v); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		var counted []portero.Hit
		violated := 0
		for i, res := range v.Results {
			never := res.Rule.MaxCost() == 0 || !res.CheckOnly && res.Cost > res.Rule.MaxCost()
			if (res.Outcome == engine.CanNeverPass) != never {
				t.Fatalf("step %d hit %d (%s cost %d max %d check %v): outcome %s", step, i, res.Rule.Name, res.Cost, res.Rule.MaxCost(), res.CheckOnly, res.Outcome)
			}
			if res.Outcome == engine.CheckOnly && !res.CheckOnly || res.Outcome == engine.NotCounted && v.Allowed {
				t.Fatalf("step %d hit %d: outcome %s, check-only %v, allowed %v", step, i, res.Outcome, res.CheckOnly, v.Allowed)
			}
			if !res.Rule.Shadow && (res.Outcome == engine.Refused || res.Outcome == engine.CanNeverPass) {
				violated++
			}
			if res.Outcome == engine.CanNeverPass && res.Decision.RetryAfter != 0 {
				t.Fatalf("step %d hit %d: can-never-pass with retry %v", step, i, res.Decision.RetryAfter)
			}
			if v.Allowed && !res.CheckOnly && (res.Outcome == engine.Allowed || res.Outcome == engine.NearLimit) {
				counted = append(counted, portero.Hit{Rule: res.Rule.Rule, Key: res.Key, Cost: res.Cost})
			}
		}
		if violated != len(v.Violated) || v.Allowed != (violated == 0) {
			t.Fatalf("step %d: %d violated hits, Violated %v, Allowed %v", step, violated, v.Violated, v.Allowed)
		}
		if len(counted) > 0 {
			ds, err := model.AllowAll(ctx, now, counted)
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range ds {
				if !d.Allowed {
					t.Fatalf("step %d: the model refuses counted hit %d (%+v) that the engine counted", step, i, counted[i])
				}
			}
		}
		for _, rule := range rules[:len(rules)-1] {
			for _, k := range keys {
				g, _ := st.Peek(ctx, rule.Rule, k, now, 1)
				w, _ := model.Peek(ctx, rule.Rule, k, now, 1)
				if g != w {
					t.Fatalf("step %d (%v): %s/%s holds %+v, the model %+v", step, hits, rule.Name, k, g, w)
				}
			}
		}
	}
}

func TestDecideTraces(t *testing.T) {
	for seed := range uint64(20) {
		checkTrace(t, seed, 300)
	}
}

func FuzzDecide(f *testing.F) {
	f.Add(uint64(1), uint16(50))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) { checkTrace(t, seed, int(steps%400)) })
}
