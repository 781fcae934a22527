package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/memstore"
)

// Two stacked rules, per client and per tenant, decided all-or-nothing:
// once the client has used its 2 per minute, its next request is refused
// and the tenant's counter does not move.
func ExampleEngine_Decide() {
	ctx := context.Background()
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	defer store.Close(ctx)
	perClient, _ := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "per-client", Algorithm: portero.FixedWindow, Limit: portero.PerMinute(2)}})
	perTenant, _ := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "per-tenant", Algorithm: portero.TokenBucket, Limit: portero.PerMinute(100)}})
	e, err := engine.New(engine.Options{Store: store, OnError: portero.FailAllow})
	if err != nil {
		panic(err)
	}
	hits := []engine.Hit{{Rule: perClient, Key: "alice", Cost: 1}, {Rule: perTenant, Key: "acme", Cost: 1}}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	var v engine.Verdict // reused for every request
	for range 3 {
		if err := e.Decide(ctx, now, hits, &v); err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v", v.Allowed)
		for _, r := range v.Results {
			fmt.Printf(" %s:%s(%d left)", r.Rule.Name, r.Outcome, r.Decision.Remaining)
		}
		fmt.Println()
	}
	// Output:
	// allowed=true per-client:allowed(1 left) per-tenant:allowed(99 left)
	// allowed=true per-client:near-limit(0 left) per-tenant:allowed(98 left)
	// allowed=false per-client:refused(0 left) per-tenant:not-counted(98 left)
}

// A cost above what a rule can ever admit is a refusal that says so, with
// no time to come back after.
func ExampleVerdict_NeverPasses() {
	store, _ := memstore.New(memstore.Config{})
	upload, _ := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "upload", Algorithm: portero.TokenBucket, Limit: portero.PerSecond(1000)}, Unit: "content-bytes"})
	e, _ := engine.New(engine.Options{Store: store})
	var v engine.Verdict
	_ = e.Decide(context.Background(), time.Unix(0, 0), []engine.Hit{{Rule: upload, Key: "alice", Cost: 5000}}, &v)
	r := v.Results[0]
	fmt.Println(v.Allowed, r.Outcome, v.NeverPasses(), r.Decision.RetryAfter, r.Cost, r.Rule.MaxCost())
	// Output: false can-never-pass true 0s 5000 1000
}

// A concurrency rule and a rate rule decided together: the request takes a
// lease, which the door gives back when the request ends; while it is
// held, a second request of the same client is refused by the concurrency
// rule, and the rate rule does not count it.
func ExampleEngine_Admit() {
	ctx := context.Background()
	store, _ := memstore.New(memstore.Config{}) // also the lease store
	defer store.Close(ctx)
	perMinute, _ := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "per-minute", Algorithm: portero.FixedWindow, Limit: portero.PerMinute(10)}})
	oneAtATime, _ := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "one-at-a-time"}, Concurrency: portero.ConcurrencyRule{Max: 1}})
	e, _ := engine.New(engine.Options{Store: store})
	hits := []engine.Hit{{Rule: perMinute, Key: "alice", Cost: 1}, {Rule: oneAtATime, Key: "alice", Cost: 1}}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

	var first, second engine.Verdict
	_ = e.Admit(ctx, now, hits, &first)
	_ = e.Admit(ctx, now, hits, &second)
	fmt.Println(first.Allowed, len(first.Held()), second.Allowed, second.Results[0].Outcome, second.Results[1].Outcome)
	for _, h := range first.Held() {
		h.Lease.Release(ctx) // the first request ended
	}
	var third engine.Verdict
	_ = e.Admit(ctx, now, hits, &third)
	fmt.Println(third.Allowed, third.Results[0].Decision.Remaining)
	// Output:
	// true 1 false not-counted refused
	// true 8
}
