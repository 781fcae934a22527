package bench

// The Redis benchmarks: Portero's Redis store beside go-redis/redis_rate and
// a raw redis-benchmark run of the same script, against a local
// redis-server that the test starts. The report is a test so that it can
// print a table; it runs only with PORTERO_BENCH_REDIS=1 (it takes about a
// minute). Run it with
//
//	cd bench && PORTERO_BENCH_REDIS=1 go test -run TestRedisReport -v -count=1 .

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/redisstore"
)

// redisRule is the rule every Redis subject enforces: GCRA, as redis_rate
// does, with a limit high enough that the work is the same whether a
// request passes or not.
var redisRule = portero.Rule{Name: "bench", Algorithm: portero.GCRA, Limit: portero.Limit{Count: 1_000_000, Window: time.Second}}

type redisSubject struct {
	name string
	open func(t testing.TB, addr string) (decide func(ctx context.Context, key string) error, close func())
}

func redisSubjects() []redisSubject {
	return []redisSubject{
		{name: "portero redisstore, unbatched (Batch: -1)", open: openStore(-1)},
		{name: "portero redisstore (rueidis, auto-pipelining, batching)", open: openStore(0)},
		{name: "same script through go-redis EVALSHA", open: func(t testing.TB, addr string) (func(context.Context, string) error, func()) {
			c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 128})
			script := goredis.NewScript(redisstore.HitSource(portero.GCRA))
			s, err := redisstore.New(redisstore.Config{Addrs: []string{addr}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(context.Background()) })
			tt := int64(redisRule.Limit.Interval())
			b := redisRule.Limit.Capacity()
			args := []any{"server", "0", "0", "1", "0", "gcra", "1", tt, b * tt, b}
			return func(ctx context.Context, key string) error {
				k, _ := s.Key(redisRule, key)
				return script.Run(ctx, c, []string{k}, args...).Err()
			}, func() { c.Close() }
		}},
		{name: "go-redis/redis_rate Allow", open: func(t testing.TB, addr string) (func(context.Context, string) error, func()) {
			c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 128})
			l := redis_rate.NewLimiter(c)
			lim := redis_rate.PerSecond(1_000_000)
			return func(ctx context.Context, key string) error {
				_, err := l.Allow(ctx, key, lim)
				return err
			}, func() { c.Close() }
		}},
	}
}

// openStore opens the store with Config.Batch set to batch.
func openStore(batch int) func(t testing.TB, addr string) (func(context.Context, string) error, func()) {
	return func(t testing.TB, addr string) (func(context.Context, string) error, func()) {
		s, err := redisstore.New(redisstore.Config{Addrs: []string{addr}, Timeout: 5 * time.Second, Batch: batch})
		if err != nil {
			t.Fatal(err)
		}
		return func(ctx context.Context, key string) error {
			_, err := s.AllowAll(ctx, time.Time{}, []portero.Hit{{Rule: redisRule, Key: key, Cost: 1}})
			return err
		}, func() { s.Close(context.Background()) }
	}
}

type loadResult struct {
	rate     float64
	p50, p99 time.Duration
}

// load runs decide from callers goroutines for d over 1000 keys.
func load(t testing.TB, decide func(context.Context, string) error, callers int, d time.Duration) loadResult {
	ctx := context.Background()
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1<<16)
			for i := 0; ; i++ {
				t0 := time.Now()
				if t0.After(deadline) {
					break
				}
				if err := decide(ctx, "k"+strconv.Itoa((g*7919+i)%1000)); err != nil {
					t.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			lat[g] = mine
		}()
	}
	wg.Wait()
	el := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return loadResult{}
	}
	return loadResult{
		rate: float64(len(all)) / el.Seconds(),
		p50:  all[len(all)/2],
		p99:  all[len(all)*99/100],
	}
}

// redisBenchmark runs redis-benchmark with EVALSHA of the store's one-hit
// GCRA script, pipelined from 64 connections, and returns requests/s.
func redisBenchmark(t testing.TB, addr string, pipeline int) float64 {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Skip("redis-benchmark not found: apt-get install -y redis-tools")
	}
	sha, err := redistest.Do(addr, "SCRIPT", "LOAD", redisstore.HitSource(portero.GCRA))
	if err != nil {
		t.Fatal(err)
	}
	tt := int64(redisRule.Limit.Interval())
	b := redisRule.Limit.Capacity()
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command(bin, "-h", host, "-p", port, "-n", "300000", "-c", "64", "-P", strconv.Itoa(pipeline), "-r", "1000", "-q",
		"EVALSHA", sha, "1", "portero:{k__rand_int__}:bench", "server", "0", "0", "1", "0", "gcra", "1",
		strconv.FormatInt(tt, 10), strconv.FormatInt(b*tt, 10), strconv.FormatInt(b, 10)).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`([0-9.]+) requests per second`).FindAllSubmatch(out, -1)
	if len(m) == 0 {
		t.Fatalf("redis-benchmark output: %s", out)
	}
	r, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	return r
}

// byHashUser is a Redis user whose ACL denies FUNCTION and FCALL, so that a store
// logged in as it runs its drivers by hash (EVALSHA), as on a server
// without functions.
const byHashUser = "byhash"

// TestRedisReport prints decisions/s and p50/p99 latency at 1, 16 and 64
// callers for each subject (one caller in interleaved rounds, medians), the
// redis-benchmark figures, a bare round trip, Redis's time per one-hit
// decision for every algorithm beside redis_rate's (INFO commandstats,
// interleaved rounds, medians) and Redis memory per key for every
// algorithm.
func TestRedisReport(t *testing.T) {
	if os.Getenv("PORTERO_BENCH_REDIS") != "1" {
		t.Skip("set PORTERO_BENCH_REDIS=1 to run the Redis benchmarks (about two minutes)")
	}
	srv := redistest.Start(t)
	if _, err := redistest.Do(srv.Addr(), "ACL", "SETUSER", byHashUser, "on", ">pw", "~*", "&*", "+@all", "-function", "-fcall"); err != nil {
		t.Fatal(err)
	}
	// The subjects take turns, so that a neighbour's load on a shared
	// machine falls on all of them alike.
	subjects := append([]redisSubject{{name: "PING round trip (go-redis)", open: func(t testing.TB, addr string) (func(context.Context, string) error, func()) {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		return func(ctx context.Context, _ string) error { return c.Ping(ctx).Err() }, func() { c.Close() }
	}}}, redisSubjects()...)
	decides := make([]func(context.Context, string) error, len(subjects))
	for i, s := range subjects {
		d, closeFn := s.open(t, srv.Addr())
		decides[i] = d
		defer closeFn()
	}
	fmt.Printf("| subject | callers | decisions/s | p50 | p99 |\n|---|---:|---:|---:|---:|\n")
	rows := map[string][]string{}
	const rounds = 7
	one := make([][]loadResult, len(subjects))
	for range rounds {
		for i := range subjects {
			one[i] = append(one[i], load(t, decides[i], 1, time.Second))
		}
	}
	for i, s := range subjects {
		r := medianLoad(one[i])
		rows[s.name] = append(rows[s.name], fmt.Sprintf("| %s | 1 | %.0f | %v | %v |", s.name, r.rate, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond)))
	}
	for _, callers := range []int{16, 64} {
		for i, s := range subjects[1:] {
			r := load(t, decides[i+1], callers, 3*time.Second)
			rows[s.name] = append(rows[s.name], fmt.Sprintf("| %s | %d | %.0f | %v | %v |", s.name, callers, r.rate, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond)))
		}
	}
	for _, s := range subjects {
		fmt.Println(strings.Join(rows[s.name], "\n"))
	}
	for _, p := range []int{1, 16} {
		fmt.Printf("| redis-benchmark EVALSHA of the one-hit GCRA script, -c 64 -P %d | 64 | %.0f | | |\n", p, redisBenchmark(t, srv.Addr(), p))
	}
	fmt.Printf("\nOne caller: medians of %d interleaved rounds of a second each.\n", rounds)
	redisCost(t, srv)
	// Memory per key: one decision each, then MEMORY USAGE.
	s, err := redisstore.New(redisstore.Config{Addrs: []string{srv.Addr()}, Prefix: "mem:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	fmt.Printf("\n| algorithm | Redis bytes per key (MEMORY USAGE, after one request) |\n|---|---:|\n")
	for _, a := range portero.Algorithms {
		rule := portero.Rule{Name: "mem", Algorithm: a, Limit: portero.PerMinute(100)}
		if _, err := s.AllowAll(context.Background(), time.Now(), []portero.Hit{{Rule: rule, Key: "user-12345", Cost: 1}}); err != nil {
			t.Fatal(err)
		}
		k, _ := s.Key(rule, "user-12345")
		m, err := redistest.Do(srv.Addr(), "MEMORY", "USAGE", k)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("| %s | %s |\n", a, m)
	}
}

// medianLoad returns the median rate, p50 and p99 of rs, each on its own.
func medianLoad(rs []loadResult) loadResult {
	med := func(f func(loadResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return loadResult{
		rate: med(func(r loadResult) float64 { return r.rate }),
		p50:  time.Duration(med(func(r loadResult) float64 { return float64(r.p50) })),
		p99:  time.Duration(med(func(r loadResult) float64 { return float64(r.p99) })),
	}
}

// redisCost prints Redis's time per one-hit decision (INFO commandstats
// usec_per_call of the command the subject sends) for every algorithm
// through the store, with functions (FCALL) and by hash (EVALSHA, a user
// without FUNCTION), beside redis_rate's GCRA (EVALSHA): 20,000 decisions
// per subject and round from 64 callers over 1,000 keys, a million per
// second, in interleaved rounds; medians.
func redisCost(t *testing.T, srv *redistest.Server) {
	ctx := context.Background()
	type costSubject struct {
		name, cmd string
		decide    func(key string) error
	}
	var subjects []costSubject
	for _, user := range []string{"", byHashUser} {
		url := "redis://" + srv.Addr() + "/0"
		cmd, form := "fcall", "functions"
		if user != "" {
			url, cmd, form = "redis://"+user+":pw@"+srv.Addr()+"/0", "evalsha", "by hash"
		}
		rs, err := redisstore.New(redisstore.Config{URL: url, Prefix: "cost:" + form + ":", Timeout: 5 * time.Second, Batch: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close(ctx)
		for _, a := range portero.Algorithms {
			rule := portero.Rule{Name: "cost", Algorithm: a, Limit: portero.Limit{Count: 1_000_000, Window: time.Second}}
			subjects = append(subjects, costSubject{name: string(a) + " (" + form + ")", cmd: cmd, decide: func(key string) error {
				_, err := rs.AllowAll(ctx, time.Time{}, []portero.Hit{{Rule: rule, Key: key, Cost: 1}})
				return err
			}})
		}
	}
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 128})
	defer c.Close()
	rl := redis_rate.NewLimiter(c)
	lim := redis_rate.PerSecond(1_000_000)
	subjects = append(subjects, costSubject{name: "go-redis/redis_rate GCRA", cmd: "evalsha", decide: func(key string) error {
		_, err := rl.Allow(ctx, key, lim)
		return err
	}})
	const rounds = 5
	usec := make([][]float64, len(subjects))
	for range rounds {
		for i, s := range subjects {
			if _, err := redistest.Do(srv.Addr(), "CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for j := range 20_000 / 64 {
						if err := s.decide("k" + strconv.Itoa((g*7919+j)%1000)); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			c, ok := commandStats(t, srv.Addr())[s.cmd]
			if !ok || c.calls == 0 {
				t.Fatalf("%s: no %s in INFO commandstats", s.name, s.cmd)
			}
			usec[i] = append(usec[i], float64(c.usec)/float64(c.calls))
		}
	}
	fmt.Printf("\n| one-hit decision | command | Redis µs per decision (usec_per_call, median of %d) |\n|---|---|---:|\n", rounds)
	for i, s := range subjects {
		slices.Sort(usec[i])
		fmt.Printf("| %s | %s | %.2f |\n", s.name, strings.ToUpper(s.cmd), usec[i][rounds/2])
	}
}

// BenchmarkRedisStore measures one decision through the Redis store with
// b.RunParallel (GOMAXPROCS callers × the -cpu flag).
func BenchmarkRedisStore(b *testing.B) {
	srv := redistest.Start(b)
	s, err := redisstore.New(redisstore.Config{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		hits := []portero.Hit{{Rule: redisRule, Key: "k", Cost: 1}}
		for pb.Next() {
			if _, err := s.AllowAll(context.Background(), time.Time{}, hits); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
