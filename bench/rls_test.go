package bench

// The RLS benchmark: Portero's Envoy rate limit service (gRPC
// ShouldRateLimit over loopback, over one HTTP/2 connection and over four,
// as Envoy keeps one per worker thread; N concurrent streams) on grpc-go's
// server (rls.Serve, the default) and on the lean transport, with the
// memory store and with the Redis store, beside gubernator v2.13.0 as a
// single node (its own gRPC GetRateLimits over loopback, dialled the same
// way), and beside the Redis store's own AllowAll figure at the same
// concurrency. Same machine, same limits: 1000 per second per key, keys
// drawn from 10,000, one hit per call, so nearly every call is allowed and
// every subject does the same work.
//
// Each server runs as a local daemon: a child process (this test binary,
// re-run as TestRLSServe), so that its CPU time is measured apart from the
// client's, which stands for Envoy and in production runs elsewhere. The
// table gives, per call, the CPU time of the server process, of the client
// (this process) and of redis-server; unlike calls/s, CPU per call hardly
// depends on what else runs on the machine.
//
// The report is a test so that it can print a table; it runs only with
// PORTERO_BENCH_RLS=1 (Redis rows need redis-server). Every server runs
// at once and the subjects are measured in interleaved rounds (see
// TestRLSReport), at 64 streams unless told otherwise:
//
//	cd bench && PORTERO_BENCH_RLS=1 go test -run TestRLSReport -v -count=1 -timeout 30m .
//
// Two clients stand for Envoy: grpc-go's (a goroutine per call in flight),
// and a raw HTTP/2 client (h2client_test.go, 1 connection, one goroutine
// keeping N calls in flight), whose CPU per call is a fraction of grpc-go's
// (5-10 µs against 30-45 µs at 64 streams) and closer to Envoy's C++
// codec, so that calls/s on this 2-core machine depend less on the
// client's share of the cores. PORTERO_BENCH_RLS_CLIENT picks them: grpc,
// h2 or both (the default); PORTERO_BENCH_RLS_CONNS the connection counts
// of grpc-go's client (default 1; 1,4 adds four, one per Envoy worker).
//
// PORTERO_BENCH_RLS_BASELINE=path adds the memory-store subjects served by
// another build of this test binary (go test -c at an earlier commit), so
// that before and after are measured side by side in the same rounds.
//
// PORTERO_BENCH_RLS_ROUNDS sets the rounds (default 5),
// PORTERO_BENCH_RLS_SECONDS the seconds per row (default 3),
// PORTERO_BENCH_RLS_STREAMS the calls in flight (default 64; 1,16,64 for a
// sweep); PORTERO_BENCH_RLS_ONLY runs only the subjects whose name
// contains it (or one of its |-separated parts). PORTERO_BENCH_RLS_PROFILE=dir makes each server write a CPU
// profile (dir/<subject>.cpu) and, for Portero, an allocation profile.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	gubernator "github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
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

var rlsKeyNames = func() []string {
	ks := make([]string, rlsKeys)
	for i := range ks {
		ks[i] = "c" + strconv.Itoa(i)
	}
	return ks
}()

// rlsSubject is one server (or the store alone) driven by one client.
type rlsSubject struct {
	name string
	// client is the load generator: "grpc-go", "raw h2", or "-" for the
	// subject without gRPC.
	client string
	// conns is the number of gRPC connections the client spreads its calls
	// over; 0 for the subject without gRPC.
	conns int
	// open starts the subject; run measures conc calls in flight for d.
	open func(t testing.TB) (run func(conc int, d time.Duration) rlsRow, close func())
}

// dialAll opens n plaintext connections to addr, as Envoy does (one per
// worker thread).
func dialAll(t testing.TB, addr string, n int) []*grpc.ClientConn {
	t.Helper()
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	return conns
}

// roundRobin returns the index of the connection for the next call.
func roundRobin(n int) func() int {
	var next atomic.Uint32
	return func() int { return int(next.Add(1) % uint32(n)) }
}

// spawn runs server kind (see TestRLSServe) in a child process and returns
// its gRPC address, its process id and a func that stops it.
func spawn(t testing.TB, kind string) (string, int, func()) {
	t.Helper()
	exe := os.Args[0]
	if k, ok := strings.CutPrefix(kind, "before:"); ok {
		// The same server built from an earlier commit: see
		// PORTERO_BENCH_RLS_BASELINE.
		exe, kind = os.Getenv("PORTERO_BENCH_RLS_BASELINE"), k
	}
	cmd := exec.Command(exe, "-test.run=^TestRLSServe$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PORTERO_BENCH_RLS_SERVE="+kind)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	addr := ""
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "RLS-ADDR "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("server %s did not start", kind)
	}
	go io.Copy(io.Discard, stdout)
	return addr, cmd.Process.Pid, func() {
		stdin.Close() // the child stops when its stdin closes
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
}

// TestRLSServe is the child side of spawn: it serves PORTERO_BENCH_RLS_SERVE
// ("memory", "redis=<addr>", "gubernator", or "portero-lean-memory" and
// "portero-lean-redis=<addr>" for Portero on the lean transport) on 127.0.0.1,
// prints "RLS-ADDR <addr>" and serves until its stdin closes.
func TestRLSServe(t *testing.T) {
	kind := os.Getenv("PORTERO_BENCH_RLS_SERVE")
	if kind == "" {
		t.Skip("the server side of TestRLSReport")
	}
	var addr string
	var stop func()
	porteroKind, serve := kind, serveGRPCGo
	if k, ok := strings.CutPrefix(kind, "portero-lean-"); ok {
		if serveLean == nil {
			t.Fatalf("server %q: the lean transport is not wired in (see serveLean)", kind)
		}
		porteroKind, serve = k, serveLean
	}
	switch {
	case porteroKind == "memory":
		st, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		addr, stop = startRLS(t, st, rlsConfig, rls.ServiceOptions{}, serve)
	case strings.HasPrefix(porteroKind, "redis="):
		st, err := redisstore.New(redisstore.Config{Addrs: []string{strings.TrimPrefix(porteroKind, "redis=")}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		addr, stop = startRLS(t, st, rlsConfig, rls.ServiceOptions{}, serve)
	case kind == "gubernator":
		addr, stop = serveGubernator(t)
	default:
		t.Fatalf("unknown server %q", kind)
	}
	if dir := os.Getenv("PORTERO_BENCH_RLS_PROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, strings.ReplaceAll(kind, ":", "_")+".cpu"))
		if err != nil {
			t.Fatal(err)
		}
		runtime.MemProfileRate = 64 << 10
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
			if m, err := os.Create(filepath.Join(dir, strings.ReplaceAll(kind, ":", "_")+".alloc")); err == nil {
				pprof.Lookup("allocs").WriteTo(m, 0)
				m.Close()
			}
		}()
	}
	fmt.Printf("RLS-ADDR %s\n", addr)
	io.Copy(io.Discard, os.Stdin)
	stop()
}

// rlsServeFunc runs svc on lis until ctx is done, then stops gracefully
// within grace: rls.Serve on one transport.
type rlsServeFunc func(ctx context.Context, lis net.Listener, svc *rls.Service, grace time.Duration) error

// serveGRPCGo is Portero's RLS on grpc-go's server, with the options
// `portero rls` runs by default.
func serveGRPCGo(ctx context.Context, lis net.Listener, svc *rls.Service, grace time.Duration) error {
	return rls.Serve(ctx, lis, svc, rls.ServerOptions{ShutdownGrace: grace})
}

// serveLean is Portero's RLS on its lean HTTP/2 transport (internal/h2grpc),
// with the same semantics and the same default limits. Set it to nil to
// leave the portero-lean subjects and test cases out.
var serveLean rlsServeFunc = func(ctx context.Context, lis net.Listener, svc *rls.Service, grace time.Duration) error {
	return rls.Serve(ctx, lis, svc, rls.ServerOptions{Transport: rls.TransportLean, ShutdownGrace: grace})
}

// startRLS runs Portero's RLS with store st, the envoyproxy/ratelimit YAML
// config and service options so on 127.0.0.1 with serve, and returns its
// address and a func that stops it and closes st.
func startRLS(t testing.TB, st portero.Store, config string, so rls.ServiceOptions, serve rlsServeFunc) (string, func()) {
	t.Helper()
	lim, err := envoyconf.Parse([]envoyconf.Source{{Name: "bench.yaml", Data: []byte(config)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Store: st, OnError: portero.FailError})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, lis, rls.NewService(descriptor.NewCompiler(lim, descriptor.Options{}), eng, so), time.Second)
	}()
	var once sync.Once
	return lis.Addr().String(), func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serving the RLS: %v", err)
			}
			st.Close(context.Background())
		})
	}
}

func serveGubernator(t testing.TB) (string, func()) {
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
	return grpcAddr, d.Close
}

// porteroRequest is the ShouldRateLimit request for key index k.
func porteroRequest(k int) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: rlsKeyNames[k]}}},
	}}
}

// gubernatorRequest is the GetRateLimits request for key index k: the same
// limit as rlsConfig's.
func gubernatorRequest(k int) *gubernator.GetRateLimitsReq {
	return &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{{
		Name: "bench_client", UniqueKey: rlsKeyNames[k], Hits: 1, Limit: 1000, Duration: 1000,
		Algorithm: gubernator.Algorithm_TOKEN_BUCKET,
	}}}
}

// porteroClient returns a ShouldRateLimit caller over conns connections to
// the Portero server kind.
func porteroClient(t testing.TB, kind string, conns int) (func(context.Context, int) error, int, func()) {
	addr, pid, stop := spawn(t, kind)
	cs := dialAll(t, addr, conns)
	clients := make([]pb.RateLimitServiceClient, conns)
	for i, c := range cs {
		clients[i] = pb.NewRateLimitServiceClient(c)
	}
	pick := roundRobin(conns)
	return func(ctx context.Context, k int) error {
			resp, err := clients[pick()].ShouldRateLimit(ctx, porteroRequest(k))
			if err != nil {
				return err
			}
			if resp.OverallCode == pb.RateLimitResponse_UNKNOWN {
				return fmt.Errorf("overall_code UNKNOWN")
			}
			return nil
		}, pid, func() {
			for _, c := range cs {
				c.Close()
			}
			stop()
		}
}

// gubernatorClient returns a GetRateLimits caller over conns connections,
// dialled exactly as Portero's (gubernator.DialV1Server would add an
// OpenTelemetry stats handler: client work Portero's client does not do).
func gubernatorClient(t testing.TB, conns int) (func(context.Context, int) error, int, func()) {
	addr, pid, stop := spawn(t, "gubernator")
	cs := dialAll(t, addr, conns)
	clients := make([]gubernator.V1Client, conns)
	for i, c := range cs {
		clients[i] = gubernator.NewV1Client(c)
	}
	pick := roundRobin(conns)
	return func(ctx context.Context, k int) error {
			resp, err := clients[pick()].GetRateLimits(ctx, gubernatorRequest(k))
			if err != nil {
				return err
			}
			if e := resp.Responses[0].Error; e != "" {
				return fmt.Errorf("gubernator: %s", e)
			}
			return nil
		}, pid, func() {
			for _, c := range cs {
				c.Close()
			}
			stop()
		}
}

// grpcGoRun returns the run func of a subject driven by grpc-go's client.
func grpcGoRun(call func(context.Context, int) error, pid int) func(int, time.Duration) rlsRow {
	return func(conc int, d time.Duration) rlsRow { return drive(call, pid, conc, d) }
}

// rawBodies returns the request bodies (gRPC prefix and protobuf message)
// of every key, built once: the raw client then only picks one per call.
func rawBodies[M proto.Message](t testing.TB, req func(k int) M) [][]byte {
	bodies := make([][]byte, rlsKeys)
	for k := range bodies {
		b, err := proto.Marshal(req(k))
		if err != nil {
			t.Fatal(err)
		}
		bodies[k] = grpcFrame(b)
	}
	return bodies
}

// porteroCheck accepts a ShouldRateLimit response whose overall_code is OK
// or OVER_LIMIT (UNKNOWN, the zero value, is absent from the wire).
func porteroCheck(msg []byte) error {
	raw, ok, err := findField(msg, 1, protowire.VarintType)
	if err != nil || !ok {
		return cmp.Or(err, errors.New("overall_code UNKNOWN"))
	}
	v, _ := protowire.ConsumeVarint(raw)
	if v != uint64(pb.RateLimitResponse_OK) && v != uint64(pb.RateLimitResponse_OVER_LIMIT) {
		return fmt.Errorf("overall_code %d", v)
	}
	return nil
}

// gubernatorCheck accepts a GetRateLimits response whose first response
// has no error.
func gubernatorCheck(msg []byte) error {
	raw, ok, err := findField(msg, 1, protowire.BytesType)
	if err != nil || !ok {
		return cmp.Or(err, errors.New("gubernator: no response"))
	}
	resp, _ := protowire.ConsumeBytes(raw)
	raw, ok, err = findField(resp, 5, protowire.BytesType)
	if err != nil {
		return err
	}
	if e, _ := protowire.ConsumeBytes(raw); ok && len(e) > 0 {
		return fmt.Errorf("gubernator: %s", e)
	}
	return nil
}

// findField returns the encoded value (a varint, or a length and its
// bytes) of the first field num of wire type typ in msg.
func findField(msg []byte, num protowire.Number, typ protowire.Type) ([]byte, bool, error) {
	for len(msg) > 0 {
		fnum, ftyp, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return nil, false, protowire.ParseError(n)
		}
		msg = msg[n:]
		m := protowire.ConsumeFieldValue(fnum, ftyp, msg)
		if m < 0 {
			return nil, false, protowire.ParseError(m)
		}
		if fnum == num && ftyp == typ {
			return msg[:m], true, nil
		}
		msg = msg[m:]
	}
	return nil, false, nil
}

// rawSubject returns the open func of a subject driven by the raw HTTP/2
// client over one connection to server kind, calling method with bodies.
func rawSubject(kind, method string, bodies func(testing.TB) [][]byte, check func([]byte) error) func(testing.TB) (func(int, time.Duration) rlsRow, func()) {
	return func(t testing.TB) (func(int, time.Duration) rlsRow, func()) {
		bs := bodies(t)
		addr, pid, stop := spawn(t, kind)
		c, err := h2Dial(addr, method, h2Options{})
		if err != nil {
			stop()
			t.Fatal(err)
		}
		return func(conc int, d time.Duration) rlsRow {
				r := rand.New(rand.NewPCG(uint64(conc), 42))
				row, err := driveRaw(c, func() []byte { return bs[r.IntN(rlsKeys)] }, check, pid, conc, d)
				if err != nil {
					t.Errorf("%s, raw h2 at %d: %v", kind, conc, err)
				}
				return row
			}, func() {
				c.Close()
				stop()
			}
	}
}

// rlsClients are the clients PORTERO_BENCH_RLS_CLIENT asks for.
func rlsClients() (grpcGo, raw bool) {
	switch v := os.Getenv("PORTERO_BENCH_RLS_CLIENT"); v {
	case "grpc":
		return true, false
	case "h2":
		return false, true
	case "", "both":
		return true, true
	default:
		panic("PORTERO_BENCH_RLS_CLIENT=" + v + ": want grpc, h2 or both")
	}
}

// rlsConns are the connection counts grpc-go's client is measured with
// (PORTERO_BENCH_RLS_CONNS, default 1: a single-threaded Envoy keeps one
// connection; 1,4 adds four, as an Envoy with four worker threads keeps).
// The raw client keeps one.
func rlsConns() []int {
	v := cmp.Or(os.Getenv("PORTERO_BENCH_RLS_CONNS"), "1")
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			panic("PORTERO_BENCH_RLS_CONNS=" + v + ": want a comma-separated list of connection counts")
		}
		out = append(out, n)
	}
	return out
}

const (
	nameMemory     = "portero rls, memory store"
	nameRedis      = "portero rls, redis store"
	nameLeanMemory = "portero lean rls, memory store"
	nameLeanRedis  = "portero lean rls, redis store"
	nameGubernator = "gubernator v2.13.0, single node"
	nameStoreAlone = "redis store AllowAll alone (no gRPC)"
	// nameBefore starts the names of the subjects served by the baseline
	// binary.
	nameBefore = "before: "
)

func rlsSubjects(redisAddr string) []rlsSubject {
	grpcGo, raw := rlsClients()
	porteroBodies := func(t testing.TB) [][]byte { return rawBodies(t, porteroRequest) }
	gubernatorBodies := func(t testing.TB) [][]byte { return rawBodies(t, gubernatorRequest) }
	var subs []rlsSubject
	// addPortero adds the subjects of Portero server kind under name.
	addPortero := func(name, kind string) {
		if grpcGo {
			for _, n := range rlsConns() {
				subs = append(subs, rlsSubject{name: name, client: "grpc-go", conns: n, open: func(t testing.TB) (func(int, time.Duration) rlsRow, func()) {
					call, pid, stop := porteroClient(t, kind, n)
					return grpcGoRun(call, pid), stop
				}})
			}
		}
		if raw {
			subs = append(subs, rlsSubject{name: name, client: "raw h2", conns: 1,
				open: rawSubject(kind, pb.RateLimitService_ShouldRateLimit_FullMethodName, porteroBodies, porteroCheck)})
		}
	}
	addPortero(nameMemory, "memory")
	if serveLean != nil {
		addPortero(nameLeanMemory, "portero-lean-memory")
	}
	if os.Getenv("PORTERO_BENCH_RLS_BASELINE") != "" {
		addPortero(nameBefore+nameMemory, "before:memory")
		addPortero(nameBefore+nameLeanMemory, "before:portero-lean-memory")
	}
	if grpcGo {
		for _, n := range rlsConns() {
			subs = append(subs, rlsSubject{name: nameGubernator, client: "grpc-go", conns: n, open: func(t testing.TB) (func(int, time.Duration) rlsRow, func()) {
				call, pid, stop := gubernatorClient(t, n)
				return grpcGoRun(call, pid), stop
			}})
		}
	}
	if raw {
		subs = append(subs, rlsSubject{name: nameGubernator, client: "raw h2", conns: 1,
			open: rawSubject("gubernator", gubernator.V1_GetRateLimits_FullMethodName, gubernatorBodies, gubernatorCheck)})
	}
	if redisAddr == "" {
		return subs
	}
	addPortero(nameRedis, "redis="+redisAddr)
	if serveLean != nil {
		addPortero(nameLeanRedis, "portero-lean-redis="+redisAddr)
	}
	return append(subs,
		rlsSubject{name: nameStoreAlone, client: "-", open: func(t testing.TB) (func(int, time.Duration) rlsRow, func()) {
			st, err := redisstore.New(redisstore.Config{Addrs: []string{redisAddr}, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			rule := portero.Rule{Name: "bench.client", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 1000, Window: time.Second}}
			return grpcGoRun(func(ctx context.Context, k int) error {
				_, err := st.AllowAll(ctx, time.Now(), []portero.Hit{{Rule: rule, Key: "bench|client=" + rlsKeyNames[k], Cost: 1}})
				return err
			}, 0), func() { st.Close(context.Background()) }
		}},
	)
}

type rlsRow struct {
	calls    float64 // per second
	p50, p99 time.Duration
	errs     int64
	// server, client and redis are CPU time (user and system) per call of
	// the server process, of this process (the client; for a subject
	// without a server process, client and store) and of redis-server.
	server, client, redis time.Duration
}

// redisPID is redis-server's process id; 0 when there is none.
var redisPID int

// selfCPU returns the CPU time this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU reads the CPU time process pid has used so far from /proc (utime
// and stime, in clock ticks of 1/100 s); 0 for pid 0.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// redisServerPID asks the Redis server at addr for its process id.
func redisServerPID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0, err
	}
	var buf []byte
	tmp := make([]byte, 4096)
	for {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if _, rest, ok := bytes.Cut(buf, []byte("process_id:")); ok {
			if v, _, ok := bytes.Cut(rest, []byte("\r\n")); ok {
				return strconv.Atoi(string(v))
			}
		}
		if err != nil {
			return 0, err
		}
	}
}

// drive runs call from conc goroutines for d and measures every call and
// the CPU time of this process, of process pid and of redis-server.
func drive(call func(context.Context, int) error, pid, conc int, d time.Duration) rlsRow {
	var errs atomic.Int64
	lats := make([][]time.Duration, conc)
	for g := range lats {
		lats[g] = make([]time.Duration, 0, 1<<16)
	}
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	self0, server0, redis0 := selfCPU(), procCPU(pid), procCPU(redisPID)
	begin := time.Now()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 42))
			ls := lats[g]
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
	self, server, redis := selfCPU()-self0, procCPU(pid)-server0, procCPU(redisPID)-redis0
	all := slices.Concat(lats...)
	slices.Sort(all)
	row := rlsRow{calls: float64(len(all)) / elapsed.Seconds(), errs: errs.Load()}
	if n := time.Duration(len(all)); n > 0 {
		row.p50 = all[len(all)/2]
		row.p99 = all[len(all)*99/100]
		row.server, row.client, row.redis = server/n, self/n, redis/n
	}
	return row
}

// driveRaw keeps conc calls in flight on the raw client c for d, with
// bodies from next and responses checked by check, and measures as drive
// does.
func driveRaw(c *h2Client, next func() []byte, check func([]byte) error, pid, conc int, d time.Duration) (rlsRow, error) {
	self0, server0, redis0 := selfCPU(), procCPU(pid), procCPU(redisPID)
	begin := time.Now()
	res, err := c.Run(conc, d, next, check)
	elapsed := time.Since(begin)
	self, server, redis := selfCPU()-self0, procCPU(pid)-server0, procCPU(redisPID)-redis0
	all := res.Lats
	slices.Sort(all)
	row := rlsRow{calls: float64(len(all)) / elapsed.Seconds(), errs: res.Errs}
	if err != nil && row.errs == 0 {
		row.errs = 1
	}
	if n := time.Duration(len(all)); n > 0 {
		row.p50 = all[len(all)/2]
		row.p99 = all[len(all)*99/100]
		row.server, row.client, row.redis = server/n, self/n, redis/n
	}
	if err == nil && res.FirstErr != nil {
		err = res.FirstErr
	}
	return row, err
}

func micros(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 1, 64)
}

// envInt reads a positive integer from the environment, def when unset.
func envInt(t testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// TestRLSReport measures every subject in interleaved rounds: all servers
// run at once (idle but for the one measured), and each round measures
// every subject once, starting one subject later than the round before, so
// that a burst of load from elsewhere on the shared machine lands on
// different subjects in different rounds. Ratios between subjects are
// taken within each round (side by side) and summarised by their median.
func TestRLSReport(t *testing.T) {
	if os.Getenv("PORTERO_BENCH_RLS") != "1" {
		t.Skip("set PORTERO_BENCH_RLS=1 to run the RLS benchmark report")
	}
	secs := envInt(t, "PORTERO_BENCH_RLS_SECONDS", 3)
	rounds := envInt(t, "PORTERO_BENCH_RLS_ROUNDS", 5)
	concs := []int{64}
	if v := os.Getenv("PORTERO_BENCH_RLS_STREAMS"); v != "" {
		concs = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("PORTERO_BENCH_RLS_STREAMS=%q: want a comma-separated list of stream counts", v)
			}
			concs = append(concs, n)
		}
	}
	redisAddr := ""
	if _, err := exec.LookPath("redis-server"); err == nil {
		redisAddr = redistest.Start(t).Addr()
		pid, err := redisServerPID(redisAddr)
		if err != nil {
			t.Fatalf("redis-server's process id: %v", err)
		}
		redisPID = pid
	} else {
		t.Log("redis-server not found: Redis rows skipped")
	}
	only := os.Getenv("PORTERO_BENCH_RLS_ONLY")
	var subs []rlsSubject
	for _, s := range rlsSubjects(redisAddr) {
		if only == "" || slices.ContainsFunc(strings.Split(only, "|"), func(o string) bool { return strings.Contains(s.name, o) }) {
			subs = append(subs, s)
		}
	}
	runs := make([]func(int, time.Duration) rlsRow, len(subs))
	for i, s := range subs {
		run, closeFn := s.open(t)
		defer closeFn()
		run(8, 300*time.Millisecond) // warm up: connections, tables, scripts
		runs[i] = run
	}
	fmt.Printf("\nShouldRateLimit-equivalent decisions, %d rounds of %d s per row, GOMAXPROCS=%d, keys=%d, limit 1000/s per key;\n", rounds, secs, runtime.GOMAXPROCS(0), rlsKeys)
	fmt.Printf("CPU µs per call of the server process, of the client (for the store alone: client and store) and of redis-server\n\n")
	fmt.Printf("| round | subject | client | conns | streams | calls/s | p50 | p99 | server CPU | client CPU | redis CPU | errors |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	// rows[rowKey][conc] holds one row per round.
	rows := map[string]map[int][]rlsRow{}
	for r := 0; r < rounds; r++ {
		for j := range subs {
			i := (j + r) % len(subs)
			s := subs[i]
			key := rowKey(s.name, s.client, s.conns)
			if rows[key] == nil {
				rows[key] = map[int][]rlsRow{}
			}
			for _, conc := range concs {
				if s.conns > 1 && conc < s.conns {
					continue
				}
				row := runs[i](conc, time.Duration(secs)*time.Second)
				fmt.Printf("| %d | %s | %s | %s | %d | %.0f | %v | %v | %s | %s | %s | %d |\n", r+1, s.name, s.client, connsText(s.conns), conc, row.calls,
					row.p50.Round(time.Microsecond), row.p99.Round(time.Microsecond), micros(row.server), micros(row.client), micros(row.redis), row.errs)
				if row.errs > 0 {
					t.Errorf("%s (%s, %s conns) at %d, round %d: %d errors", s.name, s.client, connsText(s.conns), conc, r+1, row.errs)
				}
				rows[key][conc] = append(rows[key][conc], row)
			}
		}
	}
	fmt.Printf("\nMedians over the rounds:\n\n| subject | client | conns | streams | calls/s (min–max) | p99 | server CPU | client CPU | redis CPU |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range subs {
		for _, conc := range concs {
			rs := rows[rowKey(s.name, s.client, s.conns)][conc]
			if len(rs) == 0 {
				continue
			}
			calls := medianOf(rs, func(r rlsRow) float64 { return r.calls })
			lo, hi := extremes(rs, func(r rlsRow) float64 { return r.calls })
			fmt.Printf("| %s | %s | %s | %d | %.0f (%.0f–%.0f) | %v | %s | %s | %s |\n", s.name, s.client, connsText(s.conns), conc, calls, lo, hi,
				time.Duration(medianOf(rs, func(r rlsRow) float64 { return float64(r.p99) })).Round(time.Microsecond),
				micros(time.Duration(medianOf(rs, func(r rlsRow) float64 { return float64(r.server) }))),
				micros(time.Duration(medianOf(rs, func(r rlsRow) float64 { return float64(r.client) }))),
				micros(time.Duration(medianOf(rs, func(r rlsRow) float64 { return float64(r.redis) }))))
		}
	}
	// sideBySide prints the per-round ratio of a's calls/s to b's.
	sideBySide := func(a, b string, conc int, what, target string) {
		ra, rb := rows[a][conc], rows[b][conc]
		n := min(len(ra), len(rb))
		if n == 0 {
			return
		}
		ratios := make([]float64, n)
		var each []string
		for i := range n {
			ratios[i] = ra[i].calls / rb[i].calls
			each = append(each, strconv.FormatFloat(ratios[i], 'f', 2, 64))
		}
		sorted := slices.Clone(ratios)
		slices.Sort(sorted)
		fmt.Printf("* %d streams, %s: median %.2f× (rounds: %s)%s\n", conc, what, median(sorted), strings.Join(each, ", "), target)
	}
	fmt.Printf("\nSide by side, calls/s ratio within each round:\n\n")
	ccs := [][2]any{{"raw h2", 1}}
	for _, n := range rlsConns() {
		ccs = append(ccs, [2]any{"grpc-go", n})
	}
	for _, conc := range concs {
		for _, cc := range ccs {
			client, conns := cc[0].(string), cc[1].(int)
			g := rowKey(nameGubernator, client, conns)
			sideBySide(rowKey(nameMemory, client, conns), g, conc, fmt.Sprintf("%s client, %d conn: portero rls (grpc-go) / gubernator", client, conns), " (target ≥ 2.5×)")
			sideBySide(rowKey(nameLeanMemory, client, conns), g, conc, fmt.Sprintf("%s client, %d conn: portero lean rls / gubernator", client, conns), " (target ≥ 4×)")
			alone := rowKey(nameStoreAlone, "-", 0)
			sideBySide(rowKey(nameRedis, client, conns), alone, conc, fmt.Sprintf("%s client, %d conn: portero rls (grpc-go), redis store / the redis store alone", client, conns), "")
			sideBySide(rowKey(nameLeanRedis, client, conns), alone, conc, fmt.Sprintf("%s client, %d conn: portero lean rls, redis store / the redis store alone", client, conns), "")
			sideBySide(rowKey(nameLeanMemory, client, conns), rowKey(nameMemory, client, conns), conc, fmt.Sprintf("%s client, %d conn: lean / grpc-go, memory store", client, conns), "")
			sideBySide(rowKey(nameBefore+nameMemory, client, conns), g, conc, fmt.Sprintf("%s client, %d conn: before: portero rls (grpc-go) / gubernator", client, conns), "")
			sideBySide(rowKey(nameBefore+nameLeanMemory, client, conns), g, conc, fmt.Sprintf("%s client, %d conn: before: portero lean rls / gubernator", client, conns), "")
		}
	}
}

func connsText(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// medianOf returns the median of f over rs.
func medianOf(rs []rlsRow, f func(rlsRow) float64) float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	return median(vs)
}

// median of sorted values.
func median(vs []float64) float64 {
	n := len(vs)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

func extremes(rs []rlsRow, f func(rlsRow) float64) (lo, hi float64) {
	for i, r := range rs {
		v := f(r)
		if i == 0 || v < lo {
			lo = v
		}
		if i == 0 || v > hi {
			hi = v
		}
	}
	return lo, hi
}

func rowKey(name, client string, conns int) string {
	return name + "/" + client + "/" + strconv.Itoa(conns)
}
