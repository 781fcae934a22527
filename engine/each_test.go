package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/memstore"
)

// fixedRule is envoyproxy/ratelimit's limit: count per window, fixed
// window; count 0 admits nothing.
func fixedRule(t testing.TB, name string, count int64, w time.Duration, shadow, quota bool) *engine.Rule {
	t.Helper()
	r := engine.Rule{Rule: portero.Rule{Name: name, Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: count, Window: w}}, Shadow: shadow, QuotaMode: quota}
	out, err := engine.NewRule(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// counterStore is a memstore that also keeps native counters in a map, so
// that the engine's use of portero.Counter is tested beside its own
// counters on a plain store.
type counterStore struct {
	*memstore.Store
	m map[string]uint64
}

func (c *counterStore) Count(_ context.Context, now time.Time, counts []portero.Count) error {
	for i := range counts {
		w := int64(counts[i].Window / time.Second)
		k := fmt.Sprintf("%s%d", counts[i].Key, now.Unix()/w*w)
		c.m[k] += counts[i].Add
		counts[i].Value = c.m[k]
	}
	return nil
}

func countingStores(t *testing.T) map[string]portero.Store {
	mem := func() *memstore.Store {
		s, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		return s
	}
	return map[string]portero.Store{"memstore": mem(), "counter": &counterStore{Store: mem(), m: map[string]uint64{}}}
}

// brief renders a verdict as "allowed|refused: outcome/remaining ...".
func brief(v *engine.Verdict) string {
	var b strings.Builder
	if v.Allowed {
		b.WriteString("allowed:")
	} else {
		b.WriteString("refused:")
	}
	for _, r := range v.Results {
		fmt.Fprintf(&b, " %s/%d", r.Outcome, r.Decision.Remaining)
	}
	return b.String()
}

// TestCountEach: envoyproxy/ratelimit's counting, INCRBY then compare, for
// each hit on its own (a counter is named by the hit's key alone, so the
// keys differ per rule here) (the answers of testdata scenario hits_addend.yaml,
// checked against envoyproxy/ratelimit itself).
func TestCountEach(t *testing.T) {
	for name, st := range countingStores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, st, engine.Options{Counting: engine.CountEach})
			quota := fixedRule(t, "quota", 10, time.Minute, false, false)
			other := fixedRule(t, "other", 5, time.Minute, false, false)
			blocked := fixedRule(t, "blocked", 0, time.Minute, false, false)
			shadow := fixedRule(t, "shadow", 1, time.Minute, true, false)
			h := func(r *engine.Rule, key string, cost int64) engine.Hit {
				return engine.Hit{Rule: r, Key: key, Cost: cost, CheckOnly: cost == 0}
			}
			steps := []struct {
				hits []engine.Hit
				want string
			}{
				{[]engine.Hit{h(quota, "a", 8)}, "allowed: near-limit/2"},
				{[]engine.Hit{h(quota, "a", 0)}, "allowed: check-only/2"},
				{[]engine.Hit{h(quota, "a", 2)}, "allowed: near-limit/0"},
				{[]engine.Hit{h(quota, "a", 0)}, "allowed: check-only/0"}, // at exactly the limit
				{[]engine.Hit{h(quota, "a", 5)}, "refused: refused/0"},    // counted: 15
				{[]engine.Hit{h(quota, "a", 0)}, "refused: refused/0"},
				{[]engine.Hit{h(quota, "b", 3), h(other, "ob", 6)}, "refused: allowed/7 refused/0"},
				{[]engine.Hit{h(quota, "b", 1)}, "allowed: allowed/6"}, // the refused request counted 3
				{[]engine.Hit{h(quota, "c", 11)}, "refused: refused/0"},
				{[]engine.Hit{h(blocked, "x", 1)}, "refused: refused/0"},
				{[]engine.Hit{h(blocked, "y", 0)}, "allowed: check-only/0"},
				{[]engine.Hit{h(shadow, "s", 1)}, "allowed: near-limit/0"},
				{[]engine.Hit{h(shadow, "s", 1), h(quota, "qs", 1)}, "allowed: shadow-refused/0 allowed/9"},
				{[]engine.Hit{h(quota, "d", 4), h(quota, "d", 0), h(quota, "d", 4)}, "allowed: allowed/6 check-only/6 near-limit/2"},
				{[]engine.Hit{h(quota, "e", 0), h(quota, "e", 4)}, "allowed: check-only/10 allowed/6"},
			}
			for i, s := range steps {
				if got := brief(decide(t, e, 5*time.Second, s.hits...)); got != s.want {
					t.Errorf("step %d: Decide(%v) = %s, want %s", i, s.hits, got, s.want)
				}
			}
			// The next minute is a fresh window.
			if got, want := brief(decide(t, e, 65*time.Second, h(quota, "a", 1))), "allowed: allowed/9"; got != want {
				t.Errorf("next window: %s, want %s", got, want)
			}
		})
	}
}

// TestCountEachStopIncrement: with StopIncrementWhenOver, when a hit would
// go over its limit only the hits that would go over are counted
// (envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, as in
// scenario basic_stop.yaml).
func TestCountEachStopIncrement(t *testing.T) {
	for name, st := range countingStores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, st, engine.Options{Counting: engine.CountEach, StopIncrementWhenOver: true})
			perMin := fixedRule(t, "key2", 20, time.Minute, false, false)
			perHour := fixedRule(t, "key3", 10, time.Hour, false, false)
			for i := 0; i < 15; i++ {
				v := decide(t, e, time.Second, engine.Hit{Rule: perMin, Key: "k2", Cost: 1}, engine.Hit{Rule: perHour, Key: "k3", Cost: 1})
				want := fmt.Sprintf("allowed: allowed/%d %s/%d", 19-i, map[bool]string{true: "near-limit", false: "allowed"}[i >= 7], 9-i)
				if i >= 10 {
					want = "refused: allowed/10 refused/0"
				}
				if got := brief(v); got != want {
					t.Errorf("request %d: %s, want %s", i, got, want)
				}
			}
		})
	}
}

// TestCountEachCounterCap: on a store without native counters a counter
// stops at its cap (10^9 per second), over any limit, and stays there.
func TestCountEachCounterCap(t *testing.T) {
	st := countingStores(t)["memstore"]
	e := newEngine(t, st, engine.Options{Counting: engine.CountEach})
	r := fixedRule(t, "r", 10, time.Second, false, false)
	if got, want := brief(decide(t, e, 0, engine.Hit{Rule: r, Key: "k", Cost: 4_000_000_000})), "refused: refused/0"; got != want {
		t.Errorf("a cost above the cap: %s, want %s", got, want)
	}
	if got, want := brief(decide(t, e, 0, engine.Hit{Rule: r, Key: "k", CheckOnly: true})), "refused: refused/0"; got != want {
		t.Errorf("then: %s, want %s", got, want)
	}
	if got, want := brief(decide(t, e, 0, engine.Hit{Rule: r, Key: "j", Cost: 7}, engine.Hit{Rule: r, Key: "k", Cost: 1})), "refused: allowed/3 refused/0"; got != want {
		t.Errorf("beside another counter: %s, want %s", got, want)
	}
}

// TestQuotaMode: quota rules refuse a request only when all of them
// refuse; under AllOrNothing nothing is counted then, under CountEach
// everything is (envoyproxy/ratelimit's quota_mode, scenario
// quota_metadata.yaml).
func TestQuotaMode(t *testing.T) {
	cases := []struct {
		counting engine.Counting
		want     []string
	}{
		{engine.AllOrNothing, []string{
			"allowed: near-limit/0 allowed/1",            // both in quota
			"allowed: refused/0 near-limit/0",            // service_1 out of quota: service_2 pays
			"refused: refused/0 refused/0",               // both out: refused
			"refused: refused/0 not-counted/2 refused/0", // an enforced rule refuses: nothing counted
			"refused: refused/0 not-counted/2",           // its one quota hit refuses
			"refused: refused/0 not-counted/2",           // so does it check-only: nothing counted
		}},
		{engine.CountEach, []string{
			"allowed: near-limit/0 allowed/1",
			"allowed: refused/0 near-limit/0",
			"refused: refused/0 refused/0",
			"refused: refused/0 allowed/1 refused/0",
			"refused: refused/0 near-limit/0",
			"refused: refused/0 refused/0",
		}},
	}
	for _, c := range cases {
		t.Run(string(c.counting), func(t *testing.T) {
			st := countingStores(t)["memstore"]
			e := newEngine(t, st, engine.Options{Counting: c.counting})
			s1 := fixedRule(t, "service_1", 1, time.Minute, false, true)
			s2 := fixedRule(t, "service_2", 2, time.Minute, false, true)
			plain := fixedRule(t, "plain", 2, time.Minute, false, false)
			block := fixedRule(t, "block", 1, time.Minute, false, false)
			q := func(r *engine.Rule, k string) engine.Hit { return engine.Hit{Rule: r, Key: k, Cost: 1} }
			reqs := [][]engine.Hit{
				{q(s1, "1a"), q(s2, "2a")},
				{q(s1, "1a"), q(s2, "2a")},
				{q(s1, "1a"), q(s2, "2a")},
				{q(s1, "1b"), q(plain, "pb"), q(block, "full")},
				{q(s1, "1b"), q(plain, "pb")},
				{{Rule: s1, Key: "1b", CheckOnly: true}, q(plain, "pb")},
			}
			// Fill "full" first, outside the table.
			decide(t, e, time.Second, q(block, "full"))
			q1 := q(s1, "1b")
			decide(t, e, time.Second, q1)
			for i, hits := range reqs {
				if got := brief(decide(t, e, time.Second, hits...)); got != c.want[i] {
					t.Errorf("request %d: %s, want %s", i, got, c.want[i])
				}
			}
		})
	}
}

// TestCountEachFailurePolicy: when the store fails, FailAllow's counters
// are empty and FailDeny's full.
func TestCountEachFailurePolicy(t *testing.T) {
	for _, p := range []portero.FailurePolicy{portero.FailAllow, portero.FailDeny} {
		f := &flaky{Store: countingStores(t)["memstore"]}
		f.down.Store(true)
		e := newEngine(t, f, engine.Options{Counting: engine.CountEach, OnError: p})
		r := fixedRule(t, "r", 10, time.Minute, false, false)
		v := decide(t, e, 0, engine.Hit{Rule: r, Key: "k", Cost: 1})
		if v.Allowed != (p == portero.FailAllow) || v.Degraded == nil || v.Results[0].Failure != p {
			t.Errorf("%s: %s, degraded %v, failure %q", p, brief(v), v.Degraded, v.Results[0].Failure)
		}
	}
}

func TestCountingOption(t *testing.T) {
	st := countingStores(t)["memstore"]
	if _, err := engine.New(engine.Options{Store: st, Counting: "some"}); err == nil {
		t.Error(`Counting "some": no error`)
	}
	if _, err := engine.New(engine.Options{Store: st, CounterJitter: -time.Second}); err == nil {
		t.Error("CounterJitter -1s: no error")
	}
	e := newEngine(t, st, engine.Options{})
	if e.Counting() != engine.AllOrNothing {
		t.Errorf("default counting = %q", e.Counting())
	}
	// A lease is no counter: Admit refuses concurrency rules under
	// CountEach instead of counting them as rate hits.
	each := newEngine(t, st, engine.Options{Counting: engine.CountEach})
	var v engine.Verdict
	err := each.Admit(context.Background(), t0, []engine.Hit{{Rule: concRule(t, "conc", 2, false, false), Key: "k", Cost: 1}}, &v)
	if err == nil || !strings.Contains(err.Error(), "CountEach") {
		t.Errorf("Admit of a concurrency rule under CountEach = %v, want an error", err)
	}
}

// TestCountEachModel: random traces of requests (several hits, costs from
// 0 to above the limits, shadow and quota rules, instants across windows)
// decided under CountEach on the memory store and on a native counter,
// against a model of envoyproxy/ratelimit's counting written out plainly.
func TestCountEachModel(t *testing.T) {
	type spec struct {
		count         int64
		w             time.Duration
		shadow, quota bool
	}
	specs := []spec{{3, time.Second, false, false}, {10, time.Minute, false, false}, {0, time.Minute, false, false},
		{4, time.Minute, true, false}, {2, time.Minute, false, true}, {5, time.Hour, false, true}}
	for name, st := range countingStores(t) {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, st, engine.Options{Counting: engine.CountEach})
			rules := make([]*engine.Rule, len(specs))
			for i, s := range specs {
				rules[i] = fixedRule(t, fmt.Sprintf("r%d", i), s.count, s.w, s.shadow, s.quota)
			}
			model := map[string]uint64{}
			r := rand.New(rand.NewPCG(7, uint64(len(name))))
			at := 5 * time.Second
			for step := 0; step < 3000; step++ {
				at += time.Duration(r.IntN(400)) * time.Millisecond
				n := 1 + r.IntN(4)
				hits := make([]engine.Hit, n)
				for j := range hits {
					k := r.IntN(len(rules))
					cost := int64(r.IntN(13))
					hits[j] = engine.Hit{Rule: rules[k], Key: fmt.Sprintf("r%d|k%d", k, r.IntN(3)), Cost: cost, CheckOnly: cost == 0}
				}
				v := decide(t, e, at, hits...)
				now := t0.Add(at).Unix()
				// The model: each hit adds its cost to its counter, then
				// compares; quota hits refuse together.
				want := make([]string, n)
				allowed, quotas, quotaOver := true, 0, 0
				for j, h := range hits {
					s := specs[ruleIndex(rules, h.Rule)]
					w := int64(s.w / time.Second)
					key := fmt.Sprintf("%s@%d", h.Key, now/w*w)
					if !h.CheckOnly {
						model[key] += uint64(h.Cost)
					}
					c := model[key]
					over := c > uint64(s.count)
					rem := int64(0)
					if !over {
						rem = s.count - int64(c)
					}
					out := "ok"
					if over {
						out = "over"
					}
					want[j] = fmt.Sprintf("%s/%d", out, rem)
					switch {
					case s.shadow:
					case s.quota:
						quotas++
						if over {
							quotaOver++
						}
					case over:
						allowed = false
					}
				}
				if quotas > 0 && quotas == quotaOver {
					allowed = false
				}
				got := make([]string, n)
				for j, res := range v.Results {
					out := "ok"
					if res.Outcome == engine.Refused || res.Outcome == engine.ShadowRefused {
						out = "over"
					}
					got[j] = fmt.Sprintf("%s/%d", out, res.Decision.Remaining)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) || v.Allowed != allowed {
					t.Fatalf("step %d at %v: %v: got %v allowed %v, want %v allowed %v", step, at, hits, got, v.Allowed, want, allowed)
				}
			}
		})
	}
}

func ruleIndex(rules []*engine.Rule, r *engine.Rule) int {
	for i := range rules {
		if rules[i] == r {
			return i
		}
	}
	return -1
}

// ShadowAll (envoyproxy/ratelimit's SHADOW_MODE) admits a refused request
// and keeps its refusals; under CountEach a shadow quota rule is a quota
// that passes, so the quota rules beside it do not refuse.
func TestShadowAllAndShadowQuota(t *testing.T) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close(context.Background()) })
	r := fixedRule(t, "r", 1, time.Minute, false, false)
	for _, all := range []bool{false, true} {
		e := newEngine(t, mem, engine.Options{Counting: engine.CountEach, ShadowAll: all})
		key := fmt.Sprint("shadow-all-", all)
		decide(t, e, time.Second, engine.Hit{Rule: r, Key: key, Cost: 1})
		v := decide(t, e, 2*time.Second, engine.Hit{Rule: r, Key: key, Cost: 1})
		if v.Allowed != all || v.Shadowed != all || v.Results[0].Outcome != engine.Refused || len(v.Violated) == 0 == !all {
			t.Errorf("ShadowAll %v: allowed %v shadowed %v outcome %v violated %v", all, v.Allowed, v.Shadowed, v.Results[0].Outcome, v.Violated)
		}
	}
	q := fixedRule(t, "q", 1, time.Minute, false, true)
	sq := fixedRule(t, "sq", 1, time.Minute, true, true)
	e := newEngine(t, mem, engine.Options{Counting: engine.CountEach})
	decide(t, e, time.Second, engine.Hit{Rule: q, Key: "q", Cost: 1}, engine.Hit{Rule: sq, Key: "sq", Cost: 1})
	if v := decide(t, e, 2*time.Second, engine.Hit{Rule: q, Key: "q", Cost: 1}); v.Allowed {
		t.Error("the only quota over its limit: allowed")
	}
	v := decide(t, e, 3*time.Second, engine.Hit{Rule: q, Key: "q", Cost: 1}, engine.Hit{Rule: sq, Key: "sq", Cost: 1})
	if !v.Allowed || v.Results[0].Outcome != engine.Refused || v.Results[1].Outcome != engine.ShadowRefused {
		t.Errorf("beside a shadow quota: allowed %v outcomes %v %v, want allowed, refused and shadow-refused", v.Allowed, v.Results[0].Outcome, v.Results[1].Outcome)
	}
}
