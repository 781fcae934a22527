// Package race holds the distributed experiments: the race between
// instances that share one Redis counter (atomic script against a naive
// GET → compare → INCR), and instances that each count in their own memory.
//
// The naive limiter lives here and only here: it exists to show the
// check-then-act race, never to limit anything.
package race

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
	"github.com/redis/rueidis"
)

// Modes of the race, as printed.
const (
	Atomic = "atomic" // the Redis store's Lua script
	Naive  = "naive"  // GET, compare in the application, INCR
)

// Config describes a race. The zero value of a field means its default.
type Config struct {
	// Addr is the Redis server, host:port. Required.
	Addr string
	// Instances is the number of limiter instances, each with its own Redis
	// client and connection pool, as separate processes would have; 2.
	Instances int
	// Requests is the number of requests per round, spread evenly over the
	// instances and all fired at once; 400.
	Requests int
	// Limit and Window are the rule: Limit requests per Window; 50 per
	// minute.
	Limit  int64
	Window time.Duration
	// Rounds is the number of rounds, each on a fresh key; 5.
	Rounds int
	// Prefix starts the keys; "portero-race:<unix ns>:" when empty.
	Prefix string
}

// Result is the count admitted in one round by one mode.
type Result struct {
	Round    int
	Mode     string
	Admitted int64
}

func (c *Config) defaults() error {
	if c.Addr == "" {
		return errors.New("race: no Redis address")
	}
	c.Instances = cmp.Or(c.Instances, 2)
	c.Requests = cmp.Or(c.Requests, 400)
	c.Limit = cmp.Or(c.Limit, 50)
	c.Window = cmp.Or(c.Window, time.Minute)
	c.Rounds = cmp.Or(c.Rounds, 5)
	c.Prefix = cmp.Or(c.Prefix, "portero-race:"+strconv.FormatInt(time.Now().UnixNano(), 36)+":")
	switch {
	case c.Instances < 1 || c.Requests < 1 || c.Rounds < 1:
		return fmt.Errorf("race: instances %d, requests %d, rounds %d: must be positive", c.Instances, c.Requests, c.Rounds)
	case c.Limit < 1 || c.Window <= 0:
		return fmt.Errorf("race: limit %d per %v: must be positive", c.Limit, c.Window)
	}
	return nil
}

// Run runs the race: every round, first the atomic store and then the naive
// version, each on a fresh key, with all instances firing their share of
// the requests concurrently. It returns two results per round.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	// The INCR + EXPIRE form: the window starts at the round's first
	// request, so a round that happens to straddle a clock-aligned boundary
	// cannot admit two windows' worth, and "exactly the limit" holds.
	rule := portero.Rule{Name: "race", Algorithm: portero.FixedWindowAnchored, Limit: portero.Limit{Count: cfg.Limit, Window: cfg.Window}}
	stores := make([]*redisstore.Store, cfg.Instances)
	naive := make([]rueidis.Client, cfg.Instances)
	defer func() {
		for _, s := range stores {
			if s != nil {
				s.Close(context.Background())
			}
		}
		for _, c := range naive {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range stores {
		s, err := redisstore.New(redisstore.Config{Addrs: []string{cfg.Addr}, Prefix: cfg.Prefix, Timeout: 5 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("race: instance %d: %w", i, err)
		}
		stores[i] = s
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{cfg.Addr}, DisableCache: true})
		if err != nil {
			return nil, fmt.Errorf("race: instance %d: naive client: %w", i, err)
		}
		naive[i] = c
	}
	var out []Result
	for round := 1; round <= cfg.Rounds; round++ {
		key := "round-" + strconv.Itoa(round)
		n, err := fire(cfg, func(inst int) (bool, error) {
			d, err := stores[inst].AllowAll(ctx, time.Now(), []portero.Hit{{Rule: rule, Key: key, Cost: 1}})
			if err != nil {
				return false, err
			}
			return d[0].Allowed, nil
		})
		if err != nil {
			return out, err
		}
		out = append(out, Result{round, Atomic, n})
		nkey := cfg.Prefix + "naive:" + key + ":" + strconv.FormatInt(time.Now().UnixNano()/int64(cfg.Window), 10)
		n, err = fire(cfg, func(inst int) (bool, error) {
			return naiveAllow(ctx, naive[inst], nkey, cfg.Limit, cfg.Window)
		})
		if err != nil {
			return out, err
		}
		out = append(out, Result{round, Naive, n})
	}
	return out, nil
}

// fire sends cfg.Requests requests at once, spread round-robin over the
// instances, and counts the admitted ones.
func fire(cfg Config, allow func(inst int) (bool, error)) (int64, error) {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	start := make(chan struct{})
	for r := 0; r < cfg.Requests; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ok, err := allow(r % cfg.Instances)
			if err != nil {
				once.Do(func() { firstErr = err })
				return
			}
			if ok {
				admitted.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	return admitted.Load(), firstErr
}

// naiveAllow is the check-then-act limiter that races: it reads
// the counter, decides in the application and then increments, so two
// instances that read the same value both admit. For the experiment only.
func naiveAllow(ctx context.Context, c rueidis.Client, key string, limit int64, window time.Duration) (bool, error) {
	n, err := c.Do(ctx, c.B().Get().Key(key).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return false, err
	}
	if n >= limit {
		return false, nil
	}
	cmds := rueidis.Commands{
		c.B().Incr().Key(key).Build(),
		c.B().Pexpire().Key(key).Milliseconds(window.Milliseconds()).Build(),
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return false, err
		}
	}
	return true, nil
}

// InstancesResult is what n instances that each count in their own memory
// admit of one client's requests behind a round-robin load balancer.
type InstancesResult struct {
	Instances int
	Limit     int64
	Requests  int
	Admitted  int64
}

// RunInstances sends requests from one client, within one window, to 1…n
// instances that each keep the limit in local memory (memstore), spread by
// a round-robin balancer, and reports how many each setup admitted: up to
// n × limit, where a shared store would admit limit. It runs on a virtual
// clock and needs no Redis.
func RunInstances(ctx context.Context, n int, limit int64, window time.Duration, requests int) ([]InstancesResult, error) {
	if n < 1 || limit < 1 || window <= 0 || requests < 1 {
		return nil, fmt.Errorf("instances: %d instances, limit %d per %v, %d requests: must be positive", n, limit, window, requests)
	}
	rule := portero.Rule{Name: "local", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: limit, Window: window}}
	base := time.Unix(0, 0).Add(window * 1000) // the start of a window
	var out []InstancesResult
	for k := 1; k <= n; k++ {
		insts := make([]*memstore.Store, k)
		for i := range insts {
			s, err := memstore.New(memstore.Config{SweepInterval: -1})
			if err != nil {
				return nil, err
			}
			defer s.Close(context.Background())
			insts[i] = s
		}
		var admitted int64
		for r := 0; r < requests; r++ {
			// All requests inside one window, evenly spaced.
			now := base.Add(time.Duration(int64(window) * int64(r) / int64(requests)))
			d, err := insts[r%k].AllowAll(ctx, now, []portero.Hit{{Rule: rule, Key: "client", Cost: 1}})
			if err != nil {
				return nil, err
			}
			if d[0].Allowed {
				admitted++
			}
		}
		out = append(out, InstancesResult{Instances: k, Limit: limit, Requests: requests, Admitted: admitted})
	}
	return out, nil
}
