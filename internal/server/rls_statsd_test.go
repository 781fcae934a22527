package server_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/internal/rlsstats"
	"github.com/portero-rl/portero/internal/server"
)

// envoyproxyServiceCmd, when set, makes TestStatsdMatchesEnvoyproxy record
// its golden file from envoyproxy/ratelimit instead of comparing
// (scripts/envoyproxy-stats-golden.sh builds it and passes it).
var envoyproxyServiceCmd = flag.String("envoyproxy-service-cmd", "", "envoyproxy/ratelimit's service_cmd: record testdata/envoyproxy-statsd.golden from it")

const statsdGolden = "testdata/envoyproxy-statsd.golden"

// statsdConfig is the configuration of the scripted calls: plain, nested,
// shadow, unlimited, detailed_metric, value_to_metric, named limits, an
// address in a key (its dots become '_' in the stat name), two domains.
var statsdConfig = map[string]string{
	"edge.yaml": `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: api_key
    descriptors:
      - key: plan
        value: gold
        rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value: /export/*
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: internal
    rate_limit: {unlimited: true}
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: tenant
    value_to_metric: true
    descriptors:
      - key: op
        rate_limit: {unit: hour, requests_per_unit: 4}
`,
	"api.yaml": `domain: api
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 3, name: per_client}
  - key: client_ip
    value: 10.0.0.1
    rate_limit: {unit: hour, requests_per_unit: 100}
`,
}

type statsdDesc struct {
	entries  []string // key, value, key, value…
	hits     *uint64
	override *rlv3.RateLimitDescriptor_RateLimitOverride
}

type statsdCall struct {
	domain string
	hits   uint32
	descs  []statsdDesc
	times  int
}

func sd(kv ...string) statsdDesc { return statsdDesc{entries: kv} }

// statsdCalls are the scripted ShouldRateLimit calls, in order: within,
// near and over a limit one hit and several at a time, shadow mode,
// unlimited, detailed_metric and value_to_metric values, a named limit, an
// address, several descriptors at once, a check-only hits_addend of 0, a
// limit override, an unknown domain and an empty one.
var statsdCalls = []statsdCall{
	{domain: "edge", descs: []statsdDesc{sd("remote_address", "1.2.3.4")}, times: 6},
	{domain: "edge", hits: 3, descs: []statsdDesc{sd("remote_address", "1.2.3.4")}},
	{domain: "edge", hits: 3, descs: []statsdDesc{sd("remote_address", "5.6.7.8")}, times: 2},
	{domain: "edge", descs: []statsdDesc{sd("api_key", "k", "plan", "gold")}, times: 3},
	{domain: "edge", hits: 4, descs: []statsdDesc{sd("api_key", "k", "plan", "gold")}},
	{domain: "edge", hits: 4, descs: []statsdDesc{sd("api_key", "k", "plan", "gold")}},
	{domain: "edge", descs: []statsdDesc{sd("path", "/export/a")}, times: 4},
	{domain: "edge", descs: []statsdDesc{sd("internal", "yes")}, times: 2},
	{domain: "edge", descs: []statsdDesc{sd("user", "alice")}, times: 4},
	{domain: "edge", descs: []statsdDesc{sd("user", "bob")}},
	{domain: "edge", descs: []statsdDesc{sd("tenant", "t1", "op", "read")}, times: 5},
	{domain: "edge", descs: []statsdDesc{sd("tenant", "t2", "op", "read")}},
	{domain: "api", descs: []statsdDesc{sd("client", "c1")}, times: 4},
	{domain: "api", descs: []statsdDesc{sd("client_ip", "10.0.0.1")}, times: 2},
	{domain: "edge", descs: []statsdDesc{sd("remote_address", "9.9.9.9"), sd("api_key", "k2", "plan", "gold")}, times: 6},
	{domain: "edge", descs: []statsdDesc{{entries: []string{"remote_address", "7.7.7.7"}, hits: new(uint64)}}},
	{domain: "edge", descs: []statsdDesc{{entries: []string{"remote_address", "8.8.8.8"},
		override: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}}}, times: 3},
	{domain: "nowhere", descs: []statsdDesc{sd("remote_address", "1.2.3.4"), sd("user", "x")}},
	{domain: "", descs: []statsdDesc{sd("remote_address", "1.2.3.4")}},
}

func (c statsdCall) request() *pb.RateLimitRequest {
	r := &pb.RateLimitRequest{Domain: c.domain, HitsAddend: c.hits}
	for _, d := range c.descs {
		pd := &rlv3.RateLimitDescriptor{Limit: d.override}
		if d.hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.hits)
		}
		for i := 0; i < len(d.entries); i += 2 {
			pd.Entries = append(pd.Entries, &rlv3.RateLimitDescriptor_Entry{Key: d.entries[i], Value: d.entries[i+1]})
		}
		r.Descriptors = append(r.Descriptors, pd)
	}
	return r
}

// sendStatsdCalls sends every scripted call to the gRPC server at addr.
func sendStatsdCalls(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	for _, c := range statsdCalls {
		for range max(c.times, 1) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := client.ShouldRateLimit(ctx, c.request())
			cancel()
			if err != nil && c.domain != "" {
				t.Fatalf("ShouldRateLimit %s %v: %v", c.domain, c.descs, err)
			}
		}
	}
}

// statsdListener is a UDP statsd server on loopback recording every line.
type statsdListener struct {
	conn  *net.UDPConn
	lines chan string
}

func listenStatsd(t *testing.T) *statsdListener {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	l := &statsdListener{conn: conn, lines: make(chan string, 1<<16)}
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(l.lines)
				return
			}
			for _, line := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				l.lines <- line
			}
		}
	}()
	return l
}

func (l *statsdListener) port() int { return l.conn.LocalAddr().(*net.UDPAddr).Port }

// collect returns every line received until none came for quiet: the
// sender has already flushed (Portero at its stop, envoyproxy/ratelimit at
// its interval), so this only drains the socket.
func (l *statsdListener) collect(quiet time.Duration) []string {
	var out []string
	for {
		select {
		case line, ok := <-l.lines:
			if !ok {
				return out
			}
			out = append(out, line)
		case <-time.After(quiet):
			return out
		}
	}
}

// summarize aggregates statsd lines as a statsd server would: counters
// summed, timers counted, gauges named. Counters of the Go runtime
// (ratelimit.go.*) differ by process: their values are "*". Each line of
// the result is "c NAME VALUE", "ms NAME SAMPLES" or "g NAME", sorted;
// a DogStatsD line's tags stay in NAME as |#tags, sorted (their order
// means nothing).
func summarize(t *testing.T, lines []string) []string {
	t.Helper()
	counters, timers, gauges := map[string]uint64{}, map[string]int{}, map[string]bool{}
	for _, line := range lines {
		name, rest, ok1 := strings.Cut(line, ":")
		fields := strings.Split(rest, "|")
		if !ok1 || len(fields) < 2 {
			t.Fatalf("not a statsd line: %q", line)
		}
		value, kind := fields[0], fields[1]
		for _, f := range fields[2:] {
			if tags, ok := strings.CutPrefix(f, "#"); ok {
				list := strings.Split(tags, ",")
				sort.Strings(list)
				name += "|#" + strings.Join(list, ",")
			} else if f != "@1" && f != "@1.000000" {
				t.Fatalf("statsd line %q: unknown field %q", line, f)
			}
		}
		switch kind {
		case "c":
			n, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				t.Fatalf("counter %q: %v", line, err)
			}
			counters[name] += n
		case "ms":
			timers[name]++
		case "g":
			gauges[name] = true
		default:
			t.Fatalf("statsd line %q: unknown type", line)
		}
	}
	var out []string
	for n, v := range counters {
		if strings.HasPrefix(n, "ratelimit.go.") || strings.HasPrefix(n, "ratelimit.go|") {
			out = append(out, "c "+n+" *")
			continue
		}
		out = append(out, fmt.Sprintf("c %s %d", n, v))
	}
	for n, v := range timers {
		out = append(out, fmt.Sprintf("ms %s %d", n, v))
	}
	for n := range gauges {
		out = append(out, "g "+n)
	}
	sort.Strings(out)
	return out
}

// notCompared tells the lines of the golden file the comparison leaves
// out: the stats of envoyproxy/ratelimit's Redis connection pool (Portero's
// client multiplexes, it has none), the Go runtime's counters of
// garbage collections, sent only once one ran, and the DogStatsD client's
// telemetry about itself (datadog.dogstatsd.client.*, sent on its own
// clock).
func notCompared(line string) bool {
	name := strings.Fields(line + " ")[1:]
	n := ""
	if len(name) > 0 {
		n, _, _ = strings.Cut(name[0], "|")
	}
	return strings.HasPrefix(n, "ratelimit.redis_pool.") || n == "ratelimit.go.numGC" || n == "ratelimit.go.pauseTotalNs" ||
		strings.HasPrefix(n, "datadog.")
}

func writeStatsdConfig(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range statsdConfig {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatsdMatchesEnvoyproxy sends the scripted calls to `portero rls`
// in compatibility mode with statsd on and a real UDP statsd listener, and
// compares every statistic it sends (names, and values but for the Go
// runtime's) with what envoyproxy/ratelimit sent for the same calls
// (testdata/envoyproxy-statsd.golden, recorded from it by
// scripts/envoyproxy-stats-golden.sh).
func TestStatsdMatchesEnvoyproxy(t *testing.T) {
	testStatsdMatchesEnvoyproxy(t, statsdGolden, []string{"USE_STATSD=true", "STATSD_PROTOCOL=udp"},
		func(addr string) *rlsstats.Options {
			return &rlsstats.Options{Addr: addr, Protocol: "udp", FlushInterval: time.Hour}
		})
}

// TestDogStatsdMatchesEnvoyproxy: the same with DogStatsD, extra tags and
// a mogrifier that turns the descriptor's stats into tags, against what
// envoyproxy/ratelimit sent (testdata/envoyproxy-dogstatsd.golden).
func TestDogStatsdMatchesEnvoyproxy(t *testing.T) {
	m, err := rlsstats.NewMogrifier(`^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`, "ratelimit.service.rate_limit.$3",
		map[string]string{"domain": "$1", "descriptor": "$2"})
	if err != nil {
		t.Fatal(err)
	}
	testStatsdMatchesEnvoyproxy(t, "testdata/envoyproxy-dogstatsd.golden", []string{"USE_STATSD=false", "USE_DOG_STATSD=true",
		"EXTRA_TAGS=deploy:blue", "USE_DOG_STATSD_MOGRIFIERS=HITS",
		`DOG_STATSD_MOGRIFIER_HITS_PATTERN=^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`,
		"DOG_STATSD_MOGRIFIER_HITS_NAME=ratelimit.service.rate_limit.$3", "DOG_STATSD_MOGRIFIER_HITS_TAGS=domain:$1,descriptor:$2"},
		func(addr string) *rlsstats.Options {
			return &rlsstats.Options{Addr: addr, DogStatsd: true, Mogrifiers: []rlsstats.Mogrifier{m},
				Tags: map[string]string{"deploy": "blue"}, FlushInterval: time.Hour}
		})
}

// testStatsdMatchesEnvoyproxy sends the scripted calls to `portero rls`
// with the statistics opts gives, and compares what reached a UDP listener
// with golden, or records golden from envoyproxy/ratelimit run with env.
func testStatsdMatchesEnvoyproxy(t *testing.T, golden string, env []string, opts func(addr string) *rlsstats.Options) {
	l := listenStatsd(t)
	if *envoyproxyServiceCmd != "" {
		recordEnvoyproxyStatsd(t, l, golden, env)
		return
	}
	data, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(line, "#") && !notCompared(line) {
			want = append(want, line)
		}
	}
	dir := filepath.Join(t.TempDir(), "config")
	writeStatsdConfig(t, dir)
	// Mid-hour and mid-day: every scripted call falls in one window.
	at := time.Date(2026, 12, 1, 10, 20, 30, 0, time.UTC)
	r := startRLS(t, server.RLSOptions{ConfigPath: dir, Now: func() time.Time { return at },
		Envoyproxy: server.EnvoyproxyOptions{Compat: &rls.Compat{Headers: rls.HeadersNone}, Counting: engine.CountEach},
		Statsd:     opts(l.conn.LocalAddr().String())})
	sendStatsdCalls(t, strings.TrimPrefix(r.grpc, "grpc://"))
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range summarize(t, l.collect(500*time.Millisecond)) {
		if !notCompared(line) {
			got = append(got, line)
		}
	}
	if len(got) == 0 {
		t.Fatal("no statistics received")
	}
	if g, w := strings.Join(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Errorf("statistics differ from envoyproxy/ratelimit's (-want +got):\n%s", lineDiff(want, got))
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got []string) string {
	in := func(s []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range s {
			m[x] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, x := range want {
		if !g[x] {
			b.WriteString("- " + x + "\n")
		}
	}
	for _, x := range got {
		if !w[x] {
			b.WriteString("+ " + x + "\n")
		}
	}
	return b.String()
}

// recordEnvoyproxyStatsd runs envoyproxy/ratelimit's service_cmd on a
// redis-server of its own with the same configuration, sends it the
// scripted calls and writes what it sent to statsd into the golden file.
func recordEnvoyproxyStatsd(t *testing.T, l *statsdListener, golden string, env []string) {
	redis := redistest.Start(t)
	root := filepath.Join(t.TempDir(), "current")
	writeStatsdConfig(t, filepath.Join(root, "ratelimit", "config"))
	grpcPort := freeTCPPort(t)
	cmd := exec.Command(*envoyproxyServiceCmd)
	cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(freeTCPPort(t)), "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(freeTCPPort(t)),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis.Addr(), "LOG_LEVEL=error",
		"STATSD_HOST=127.0.0.1", "STATSD_PORT="+strconv.Itoa(l.port()), "STATS_FLUSH_INTERVAL=500ms")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr := fmt.Sprintf("127.0.0.1:%d", grpcPort)
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i == 200 {
			t.Fatalf("service_cmd does not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	hour := time.Now().Truncate(time.Hour)
	sendStatsdCalls(t, addr)
	if !time.Now().Truncate(time.Hour).Equal(hour) {
		t.Fatal("the calls crossed an hour boundary: run again")
	}
	time.Sleep(2 * time.Second) // four flushes: every counter has been sent
	got := summarize(t, l.collect(500*time.Millisecond))
	var b strings.Builder
	b.WriteString("# What envoyproxy/ratelimit sent to statsd for statsdCalls (rls_statsd_test.go), aggregated:\n")
	b.WriteString("# counters summed (c NAME TOTAL; the Go runtime's differ by process: *), timers counted (ms NAME SAMPLES),\n")
	b.WriteString("# gauges named (g NAME). Recorded by scripts/envoyproxy-stats-golden.sh.\n")
	for _, line := range got {
		b.WriteString(line + "\n")
	}
	if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d lines)", golden, len(got))
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestRLSStatsEndpoint: the admin listener (envoyproxy/ratelimit's debug
// port) serves /stats as it does: one "name: JSON value" line per expvar
// variable of the process, cmdline and memstats among them.
func TestRLSStatsEndpoint(t *testing.T) {
	r := startRLS(t, server.RLSOptions{})
	code, body := getEP(t, r.admin+"/stats")
	if code != 200 {
		t.Fatalf("/stats = %d %q", code, body)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		name, value, ok := strings.Cut(line, ": ")
		if !ok || !json.Valid([]byte(value)) {
			t.Fatalf("/stats line %.80q: want name: JSON value", line)
		}
		seen[name] = true
	}
	if !seen["cmdline"] || !seen["memstats"] {
		t.Errorf("/stats lists %v, want cmdline and memstats", seen)
	}
}
