package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
)

func ExampleStore_Limiter() {
	ctx := context.Background()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)

	// 2 per second with a burst of 2, as a token bucket.
	l, err := s.Limiter(portero.Rule{Name: "api", Algorithm: portero.TokenBucket, Limit: portero.PerSecond(2)})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, 500 * time.Millisecond} {
		d, err := l.AllowN(ctx, "203.0.113.7", now.Add(at), 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("at %v: allowed=%v remaining=%d retry after %v\n", at, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// at 0s: allowed=true remaining=1 retry after 0s
	// at 0s: allowed=true remaining=0 retry after 0s
	// at 0s: allowed=false remaining=0 retry after 500ms
	// at 500ms: allowed=true remaining=0 retry after 0s
}

func ExampleStore_AllowAll() {
	ctx := context.Background()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)

	perClient := portero.Rule{Name: "client", Algorithm: portero.SlidingCounter, Limit: portero.PerMinute(100)}
	global := portero.Rule{Name: "global", Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1)}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, client := range []string{"alice", "bob"} {
		ds, err := s.AllowAll(ctx, now, []portero.Hit{
			{Rule: perClient, Key: client, Cost: 1},
			{Rule: global, Key: "all", Cost: 1},
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: client %v, global %v\n", client, ds[0].Allowed, ds[1].Allowed)
	}
	// Output:
	// alice: client true, global true
	// bob: client true, global false
}
