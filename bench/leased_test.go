package bench

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/budget"
	"github.com/portero-rl/portero/store/redisstore"
)

// leasedRule is the global rule of BenchmarkLeasedGlobal: a clock-aligned
// second of 3,000,000, more than one Redis decides in a second, so that
// the steady load is measured; the budget is set by the leased case.
var leasedRule = portero.Rule{Name: "global", Algorithm: portero.FixedWindow, Limit: portero.PerSecond(3_000_000)}

// BenchmarkLeasedGlobal: one global rule decided by four store clients
// (four connections, as four processes would have) on one redis-server,
// exact (every decision in Redis, the store running concurrent one-hit
// calls as one script) against leased (store/budget in
// front of each client, a 50 ms budget). It reports decisions/s and
// redis-calls/op, the script calls per decision from INFO commandstats,
// Redis's time per script call (µs, from the same), and fails if a
// clock-aligned second admits more than the limit.
//
//	cd bench && go test -run '^$' -bench BenchmarkLeasedGlobal -benchtime 2s -count 1 .
func BenchmarkLeasedGlobal(b *testing.B) {
	srv := redistest.Start(b)
	for _, mode := range []string{"exact", "leased"} {
		b.Run(mode, func(b *testing.B) {
			rule := leasedRule
			if mode == "leased" {
				rule.Budget = 50 * time.Millisecond
			}
			stores := make([]portero.Store, 4)
			for i := range stores {
				rs, err := redisstore.New(redisstore.Config{Addrs: []string{srv.Addr()}, Prefix: mode + ":", Timeout: 5 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				stores[i] = rs
				if mode == "leased" {
					if stores[i], err = budget.New(rs, budget.Config{}); err != nil {
						b.Fatal(err)
					}
				}
			}
			defer func() {
				for _, s := range stores {
					s.Close(context.Background())
				}
			}()
			if _, err := redistest.Do(srv.Addr(), "CONFIG", "RESETSTAT"); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var windows sync.Map // Unix second → *atomic.Int64 admitted
			b.SetParallelism(16)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				s := stores[next.Add(1)%int64(len(stores))]
				hits := []portero.Hit{{Rule: rule, Key: "all", Cost: 1}}
				for pb.Next() {
					now := time.Now()
					d, err := s.AllowAll(context.Background(), now, hits)
					if err != nil {
						b.Error(err)
						return
					}
					if d[0].Allowed {
						c, _ := windows.LoadOrStore(now.Unix(), new(atomic.Int64))
						c.(*atomic.Int64).Add(1)
					}
				}
			})
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
			calls, usec := scriptCalls(b, srv.Addr())
			b.ReportMetric(float64(calls)/float64(b.N), "redis-calls/op")
			b.ReportMetric(usec, "redis-µs/call")
			windows.Range(func(k, v any) bool {
				if n := v.(*atomic.Int64).Load(); n > rule.Limit.Count {
					b.Errorf("second %d: %d admitted, limit %d", k, n, rule.Limit.Count)
				}
				return true
			})
		})
	}
}

var callsRE = regexp.MustCompile(`cmdstat_(fcall|evalsha|eval):calls=(\d+),usec=(\d+)`)

// scriptCalls is the script calls Redis ran since its last RESETSTAT, and
// Redis's time per call in µs.
func scriptCalls(b *testing.B, addr string) (int64, float64) {
	stats, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	var n, usec int64
	for _, m := range callsRE.FindAllStringSubmatch(stats, -1) {
		c, _ := strconv.ParseInt(m[2], 10, 64)
		u, _ := strconv.ParseInt(m[3], 10, 64)
		n, usec = n+c, usec+u
	}
	return n, float64(usec) / float64(max(n, 1))
}
