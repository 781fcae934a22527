package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/storetest"
)

type downStore struct{ portero.Store }

func (downStore) AllowAll(context.Context, time.Time, []portero.Hit) ([]portero.Decision, error) {
	return nil, portero.ErrStoreUnavailable
}

func (downStore) Peek(context.Context, portero.Rule, string, time.Time, int64) (portero.Decision, error) {
	return portero.Decision{}, portero.ErrStoreUnavailable
}

// The FailLocal memory is bounded: a flood of distinct keys while the store
// is down keeps at most LocalMaxKeys per rule.
func TestLocalMemoryIsBounded(t *testing.T) {
	e, err := New(Options{Store: downStore{storetest.NewReference()}, OnError: portero.FailLocal, LocalMaxKeys: 64})
	if err != nil {
		t.Fatal(err)
	}
	rule, err := NewRule(Rule{Rule: portero.Rule{Name: "r", Algorithm: portero.TokenBucket, Limit: portero.PerMinute(10)}})
	if err != nil {
		t.Fatal(err)
	}
	v := new(Verdict)
	for i := range 10_000 {
		hits := []Hit{{Rule: rule, Key: fmt.Sprint("10.0.", i/256, ".", i%256), Cost: 1}}
		if err := e.Decide(context.Background(), storetest.Base, hits, v); err != nil || !v.Allowed {
			t.Fatalf("key %d: %v, allowed %v", i, err, v.Allowed)
		}
	}
	if n := e.local.mem.Len(); n == 0 || n > 64 {
		t.Errorf("local memory holds %d keys after 10,000, want 1 to 64", n)
	}
}

func TestScale(t *testing.T) {
	for _, tt := range []struct {
		in    portero.Limit
		share float64
		want  portero.Limit
	}{
		{portero.Limit{Count: 10, Window: time.Minute}, 0.5, portero.Limit{Count: 5, Window: time.Minute}},
		{portero.Limit{Count: 10, Window: time.Minute, Burst: 3, Rate: 2}, 0.25, portero.Limit{Count: 2, Window: time.Minute, Burst: 1, Rate: 0.5}},
		{portero.Limit{Count: 1, Window: time.Second}, 0.1, portero.Limit{Count: 1, Window: time.Second}},
		{portero.Limit{Count: 7, Window: time.Second}, 1, portero.Limit{Count: 7, Window: time.Second}},
		// A quota keeps its calendar and gets its share of the count.
		{portero.PerMonth(100).WithZone("Europe/Madrid").WithOffset(time.Hour), 0.25, portero.PerMonth(25).WithZone("Europe/Madrid").WithOffset(time.Hour)},
	} {
		if got := scale(tt.in, tt.share); got != tt.want {
			t.Errorf("scale(%+v, %v) = %+v, want %+v", tt.in, tt.share, got, tt.want)
		}
	}
}

// The FailLocal memory at share 1 decides exactly as a healthy store does
// (storetest.Reference): same outcomes and decisions, for every algorithm,
// with several hits per call, and for calendar quotas across their
// boundaries.
func TestLocalMatchesReference(t *testing.T) {
	traces := map[string][]storetest.Trace{}
	for _, a := range portero.Algorithms {
		var rules []portero.Rule
		for _, r := range storetest.RandomRules() {
			if r.Algorithm == a {
				rules = append(rules, r)
			}
		}
		traces[string(a)] = storetest.RandomTrace(uint64(len(a))*13+5, rules, 400, false)
	}
	traces["calendar"] = storetest.CalendarTrace(5, storetest.CalendarRules(), 400, true)
	for name, trace := range traces {
		t.Run(name, func(t *testing.T) {
			local, err := New(Options{Store: downStore{storetest.NewReference()}, OnError: portero.FailLocal})
			if err != nil {
				t.Fatal(err)
			}
			healthy, err := New(Options{Store: storetest.NewReference(), OnError: portero.FailError})
			if err != nil {
				t.Fatal(err)
			}
			rules := map[portero.Rule]*Rule{}
			var lv, hv Verdict
			for i, c := range trace {
				hits := make([]Hit, len(c.Hits))
				for j, h := range c.Hits {
					r := rules[h.Rule]
					if r == nil {
						if r, err = NewRule(Rule{Rule: h.Rule}); err != nil {
							t.Fatal(err)
						}
						rules[h.Rule] = r
					}
					hits[j] = Hit{Rule: r, Key: h.Key, Cost: h.Cost}
				}
				now := storetest.Base.Add(c.At)
				if err := local.Decide(context.Background(), now, hits, &lv); err != nil {
					t.Fatal(err)
				}
				if err := healthy.Decide(context.Background(), now, hits, &hv); err != nil {
					t.Fatal(err)
				}
				for j := range hits {
					l, h := lv.Results[j], hv.Results[j]
					if l.Failure != portero.FailLocal || l.Outcome != h.Outcome || l.Decision != h.Decision {
						t.Fatalf("call %d (%v) hit %d:\n local   %s %s %+v\n healthy %s %+v", i, c, j, l.Failure, l.Outcome, l.Decision, h.Outcome, h.Decision)
					}
				}
			}
		})
	}
}

// Under CountEach, FailDeny refuses with its own retry time, as under
// AllOrNothing, not with the time to the window's end.
func TestCountEachFailDenyRetry(t *testing.T) {
	rule, err := NewRule(Rule{Rule: portero.Rule{Name: "r", Algorithm: portero.FixedWindow, Limit: portero.PerMinute(5)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, counting := range []Counting{AllOrNothing, CountEach} {
		e, err := New(Options{Store: downStore{storetest.NewReference()}, OnError: portero.FailDeny, Counting: counting})
		if err != nil {
			t.Fatal(err)
		}
		var v Verdict
		if err := e.Decide(context.Background(), storetest.Base.Add(10*time.Second), []Hit{{Rule: rule, Key: "k", Cost: 1}}, &v); err != nil {
			t.Fatal(err)
		}
		if d := v.Results[0].Decision; v.Allowed || d.RetryAfter != DefaultRetryAfterOnFailure || v.Results[0].Failure != portero.FailDeny {
			t.Errorf("%s: allowed %v, retry %v, failure %q; want refused by deny, retry %v", counting, v.Allowed, d.RetryAfter, v.Results[0].Failure, DefaultRetryAfterOnFailure)
		}
	}
}
