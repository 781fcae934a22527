package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/redisstore"
)

// Two instances of a service share one limit through Redis; while Redis is
// down, each decides in its own memory with half the limit (the engine's
// local failure policy). The example needs a redis-server on
// localhost:6379, so it has no Output line and is compiled but not run by
// go test.
func Example() {
	store, err := redisstore.New(redisstore.Config{URL: "redis://localhost:6379/0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close(context.Background())
	e, err := engine.New(engine.Options{Store: store, OnError: portero.FailLocal, LocalShare: 0.5})
	if err != nil {
		fmt.Println(err)
		return
	}
	api, err := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "api", Algorithm: portero.GCRA, Limit: portero.PerMinute(100)}})
	if err != nil {
		fmt.Println(err)
		return
	}
	var v engine.Verdict
	if err := e.Decide(context.Background(), time.Now(), []engine.Hit{{Rule: api, Key: "203.0.113.7", Cost: 1}}, &v); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(v.Allowed, v.Results[0].Decision.Remaining, v.Results[0].Failure)
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
