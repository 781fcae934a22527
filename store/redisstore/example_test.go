package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/redisstore"
)

// Two instances of a service share one limit through Redis. The example
// needs a redis-server on localhost:6379, so it has no Output line and is
// compiled but not run by go test.
func Example() {
	store, err := redisstore.New(redisstore.Config{
		URL:        "redis://localhost:6379/0",
		Policy:     redisstore.FailLocal, // while Redis is down, count locally…
		LocalShare: 0.5,                  // …half the limit each, for two instances
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close(context.Background())
	lim, err := store.Limiter(portero.Rule{Name: "api", Algorithm: portero.GCRA, Limit: portero.PerMinute(100)})
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := lim.AllowN(context.Background(), "203.0.113.7", time.Now(), 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Allowed, d.Remaining)
}

// A script over several rules for one key is one atomic step: when any
// rule refuses, none of them counts.
func ExampleStore_AllowAll() {
	store, err := redisstore.New(redisstore.Config{Addrs: []string{"localhost:6379"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close(context.Background())
	perUser := portero.Rule{Name: "user", Algorithm: portero.SlidingLog, Limit: portero.PerMinute(60)}
	perUserBurst := portero.Rule{Name: "user-burst", Algorithm: portero.TokenBucket, Limit: portero.PerSecond(5)}
	ds, err := store.AllowAll(context.Background(), time.Now(), []portero.Hit{
		{Rule: perUser, Key: "alice", Cost: 1},
		{Rule: perUserBurst, Key: "alice", Cost: 1},
	})
	fmt.Println(ds, err)
}
