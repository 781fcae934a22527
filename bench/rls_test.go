package bench

// The RLS benchmark: Portero's Envoy rate limit service (gRPC
// ShouldRateLimit over loopback, one HTTP/2 connection as Envoy keeps, N
// concurrent streams) with the memory store and with the Redis store,
// beside gubernator v2.13.0 run in-process as a single node (its own gRPC
// GetRateLimits over loopback), and beside the Redis store's own AllowAll
// figure at the same concurrency. Same machine, same limits: 1000 per
// second per key, keys drawn from 10,000, one hit per call, so nearly every
// call is allowed and every subject does the same work.
//
// The report is a test so that it can print a table; it runs only with
// PORTERO_BENCH_RLS=1 (about 40 seconds; Redis rows need redis-server):
//
//	cd bench && PORTERO_BENCH_RLS=1 go test -run TestRLSReport -v -count=1 .
//
// PORTERO_BENCH_RLS_SECONDS sets the seconds per row (default 3).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	gubernator "github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

const rlsConfig = `
domain: bench
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000}
`

const rlsKeys = 10_000

// rlsSubject makes one decision per call of its func, for a key index.
type rlsSubject struct {
	name string
	open func(t testing.TB) (call func(ctx context.Context, k int) error, close func())
}

func startPortero(t testing.TB, st portero.Store) (pb.RateLimitServiceClient, func()) {
	t.Helper()
	lim, err := envoyconf.Parse([]envoyconf.Source{{Name: "bench.yaml", Data: []byte(rlsConfig)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rls.NewEngine(rls.Options{Store: st, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rls.Serve(ctx, lis, rls.NewService(eng, rls.ServiceOptions{}), time.Second) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return pb.NewRateLimitServiceClient(conn), func() {
		conn.Close()
		cancel()
		<-done
		st.Close(context.Background())
	}
}

var rlsKeyNames = func() []string {
	ks := make([]string, rlsKeys)
	for i := range ks {
		ks[i] = "c" + strconv.Itoa(i)
	}
	return ks
}()

func porteroCall(c pb.RateLimitServiceClient) func(context.Context, int) error {
	return func(ctx context.Context, k int) error {
		resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: rlsKeyNames[k]}}},
		}})
		if err != nil {
			return err
		}
		if resp.OverallCode == pb.RateLimitResponse_UNKNOWN {
			return fmt.Errorf("overall_code UNKNOWN")
		}
		return nil
	}
}

func rlsSubjects(redisAddr string) []rlsSubject {
	subs := []rlsSubject{
		{name: "portero rls, memory store", open: func(t testing.TB) (func(context.Context, int) error, func()) {
			st, err := memstore.New(memstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			c, stop := startPortero(t, st)
			return porteroCall(c), stop
		}},
		{name: "gubernator v2.13.0, single node", open: func(t testing.TB) (func(context.Context, int) error, func()) {
			return startGubernator(t)
		}},
	}
	if redisAddr == "" {
		return subs
	}
	return append(subs,
		rlsSubject{name: "portero rls, redis store", open: func(t testing.TB) (func(context.Context, int) error, func()) {
			st, err := redisstore.New(redisstore.Config{Addrs: []string{redisAddr}, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			c, stop := startPortero(t, st)
			return porteroCall(c), stop
		}},
		rlsSubject{name: "redis store AllowAll alone (no gRPC)", open: func(t testing.TB) (func(context.Context, int) error, func()) {
			st, err := redisstore.New(redisstore.Config{Addrs: []string{redisAddr}, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			rule := portero.Rule{Name: "bench.client", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 1000, Window: time.Second}}
			return func(ctx context.Context, k int) error {
				_, err := st.AllowAll(ctx, time.Now(), []portero.Hit{{Rule: rule, Key: "bench|client=" + rlsKeyNames[k], Cost: 1}})
				return err
			}, func() { st.Close(context.Background()) }
		}},
	)
}

func startGubernator(t testing.TB) (func(context.Context, int) error, func()) {
	t.Helper()
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	grpcAddr, httpAddr := free(), free()
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := gubernator.SpawnDaemon(ctx, gubernator.DaemonConfig{
		Logger: log, InstanceID: grpcAddr, GRPCListenAddress: grpcAddr, HTTPListenAddress: httpAddr,
		AdvertiseAddress: grpcAddr, PeerDiscoveryType: "none",
	})
	if err != nil {
		t.Fatal(err)
	}
	d.SetPeers([]gubernator.PeerInfo{{GRPCAddress: grpcAddr, HTTPAddress: httpAddr, IsOwner: true}})
	c, err := gubernator.DialV1Server(grpcAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, k int) error {
			resp, err := c.GetRateLimits(ctx, &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{{
				Name: "bench_client", UniqueKey: rlsKeyNames[k], Hits: 1, Limit: 1000, Duration: 1000,
				Algorithm: gubernator.Algorithm_TOKEN_BUCKET,
			}}})
			if err != nil {
				return err
			}
			if e := resp.Responses[0].Error; e != "" {
				return fmt.Errorf("gubernator: %s", e)
			}
			return nil
		}, func() {
			d.Close()
		}
}

type rlsRow struct {
	calls    float64 // per second
	p50, p99 time.Duration
	errs     int64
}

// drive runs call from conc goroutines for d and measures every call.
func drive(call func(context.Context, int) error, conc int, d time.Duration) rlsRow {
	var errs atomic.Int64
	lats := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	begin := time.Now()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 42))
			ls := make([]time.Duration, 0, 1<<16)
			for time.Now().Before(stop) {
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := call(ctx, r.IntN(rlsKeys))
				cancel()
				ls = append(ls, time.Since(t0))
				if err != nil {
					errs.Add(1)
				}
			}
			lats[g] = ls
		}(g)
	}
	wg.Wait()
	elapsed := time.Since(begin)
	all := slices.Concat(lats...)
	slices.Sort(all)
	row := rlsRow{calls: float64(len(all)) / elapsed.Seconds(), errs: errs.Load()}
	if len(all) > 0 {
		row.p50 = all[len(all)/2]
		row.p99 = all[len(all)*99/100]
	}
	return row
}

func TestRLSReport(t *testing.T) {
	if os.Getenv("PORTERO_BENCH_RLS") != "1" {
		t.Skip("set PORTERO_BENCH_RLS=1 to run the RLS benchmark report")
	}
	secs := 3
	if s := os.Getenv("PORTERO_BENCH_RLS_SECONDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			secs = n
		}
	}
	redisAddr := ""
	if _, err := exec.LookPath("redis-server"); err == nil {
		redisAddr = redistest.Start(t).Addr()
	} else {
		t.Log("redis-server not found: Redis rows skipped")
	}
	fmt.Printf("\nShouldRateLimit-equivalent decisions, %d s per row, GOMAXPROCS=%d, keys=%d, limit 1000/s per key\n\n", secs, runtime.GOMAXPROCS(0), rlsKeys)
	fmt.Printf("| subject | concurrency | calls/s | p50 | p99 | errors |\n|---|---:|---:|---:|---:|---:|\n")
	for _, s := range rlsSubjects(redisAddr) {
		call, closeFn := s.open(t)
		// Warm up: connections, tables, scripts.
		drive(call, 8, 300*time.Millisecond)
		for _, conc := range []int{1, 16, 64} {
			r := drive(call, conc, time.Duration(secs)*time.Second)
			fmt.Printf("| %s | %d | %.0f | %v | %v | %d |\n", s.name, conc, r.calls, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.errs)
			if r.errs > 0 {
				t.Errorf("%s at %d: %d errors", s.name, conc, r.errs)
			}
		}
		closeFn()
	}
}
