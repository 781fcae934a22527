package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/testenv"
)

const envoyBasic = `domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: block
    rate_limit:
      name: blocked
      unit: minute
      requests_per_unit: 0
`

// envoyproxyRuntime makes envoyproxy/ratelimit's runtime directory
// (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config) with one file, and sets the
// environment a Helm chart sets: loopback ports chosen by the system,
// Redis over TCP at srv.
func envoyproxyRuntime(t *testing.T, srv *redistest.Server, file string, extra ...string) (configFile string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "current")
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	configFile = filepath.Join(dir, "basic.yaml")
	if err := os.WriteFile(configFile, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"RUNTIME_ROOT", root, "RUNTIME_SUBDIRECTORY", "ratelimit", "RUNTIME_WATCH_ROOT", "false",
		"HOST", "127.0.0.1", "PORT", "0", "GRPC_HOST", "127.0.0.1", "GRPC_PORT", "0", "DEBUG_PORT", "0",
		"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", srv.Addr(), "USE_STATSD", "false", "LOG_LEVEL", "warn"}
	env = append(env, extra...)
	for i := 0; i+1 < len(env); i += 2 {
		t.Setenv(env[i], env[i+1])
	}
	return configFile
}

// startRatelimit runs the binary as envoyproxy/ratelimit's image runs it
// (/bin/ratelimit, no arguments) and returns its gRPC, HTTP and admin
// (envoyproxy/ratelimit's debug port) addresses.
func startRatelimit(t *testing.T, args ...string) (grpcAddr, httpAddr, debugAddr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &testenv.Buffer{}, &testenv.Buffer{}
	done := make(chan error, 1)
	args = append([]string{"/bin/ratelimit"}, args...)
	go func() { done <- run(ctx, argsOf(args), out, errOut) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ratelimit returned %v; stderr: %s", err, errOut)
			}
		case <-time.After(10 * time.Second):
			t.Error("ratelimit did not stop")
		}
	})
	re := regexp.MustCompile(`gRPC listening on grpc://(\S+) \(\S+\)\n[\s\S]*HTTP listening on http://(\S+)\n[\s\S]*admin listening on http://(\S+) `)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1], m[2], m[3]
		}
		select {
		case err := <-done:
			t.Fatalf("ratelimit exited: %v; stderr: %s", err, errOut)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("ratelimit did not report its addresses; stdout: %s stderr: %s", out, errOut)
	return "", "", ""
}

type (
	pbDesc  = commonv3.RateLimitDescriptor
	pbEntry = commonv3.RateLimitDescriptor_Entry
)

func ask(t *testing.T, addr string, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
}

func durSeconds(s int64) *durationpb.Duration { return &durationpb.Duration{Seconds: s} }

func headerValues(kv ...string) []*corev3.HeaderValue {
	var hs []*corev3.HeaderValue
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, &corev3.HeaderValue{Key: kv[i], Value: kv[i+1]})
	}
	return hs
}

func itoa(n uint32) string  { return strconv.FormatUint(uint64(n), 10) }
func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// TestRatelimitImage: run as envoyproxy/ratelimit's image runs it, with
// only its environment, Portero serves its gRPC answers (proto.Equal),
// counts in Redis under its keys, and serves /json, /healthcheck and
// /rlconfig.
func TestRatelimitImage(t *testing.T) {
	srv := redistest.Start(t)
	envoyproxyRuntime(t, srv, envoyBasic, "LIMIT_RESPONSE_HEADERS_ENABLED", "true")
	g, h, d := startRatelimit(t)
	req := &pb.RateLimitRequest{Domain: "basic", Descriptors: []*pbDesc{{Entries: []*pbEntry{{Key: "key1", Value: "foo"}}}}}
	answer := func(rem uint32) *pb.RateLimitResponse {
		return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK,
				CurrentLimit:   &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 50, Unit: pb.RateLimitResponse_RateLimit_SECOND},
				LimitRemaining: rem, DurationUntilReset: durSeconds(1)}},
			ResponseHeadersToAdd: headerValues("RateLimit-Limit", "50", "RateLimit-Remaining", itoa(rem), "RateLimit-Reset", "1")}
	}
	// Within one second: retried from the start of a fresh second if the
	// machine was too slow.
	for try := 0; ; try++ {
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 5*time.Millisecond)))
		start := time.Now().Unix()
		req.Descriptors[0].Entries[0].Value = "foo" + itoa(uint32(try))
		got, err := ask(t, g, req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := protojson.Marshal(req)
		r, err := http.Post("http://"+h+"/json", "application/json", bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		keys, _ := redistest.Do(srv.Addr(), "KEYS", "basic_key1_"+req.Descriptors[0].Entries[0].Value+"_*")
		if time.Now().Unix() != start && try < 4 {
			continue
		}
		if !proto.Equal(got, answer(49)) {
			t.Errorf("gRPC answer %s, want %s", protojson.Format(got), protojson.Format(answer(49)))
		}
		var js pb.RateLimitResponse
		if err := protojson.Unmarshal(body, &js); err != nil || r.StatusCode != 200 || !proto.Equal(&js, answer(48)) {
			t.Errorf("/json = %d %s (%v), want 200 %s", r.StatusCode, body, err, protojson.Format(answer(48)))
		}
		// envoyproxy/ratelimit's key: domain_key_value_<the second>.
		if keys != "basic_key1_"+req.Descriptors[0].Entries[0].Value+"_"+itoa64(start) {
			t.Errorf("Redis keys %q, want envoyproxy/ratelimit's one for this second", keys)
		}
		break
	}
	blocked, err := ask(t, g, &pb.RateLimitRequest{Domain: "basic", Descriptors: []*pbDesc{{Entries: []*pbEntry{{Key: "block", Value: "x"}}}}})
	if err != nil || blocked.OverallCode != pb.RateLimitResponse_OVER_LIMIT || blocked.Statuses[0].CurrentLimit.GetName() != "blocked" {
		t.Errorf("a blocked descriptor: %v, %v", blocked, err)
	}
	unknown, err := ask(t, g, &pb.RateLimitRequest{Domain: "elsewhere", Descriptors: []*pbDesc{{Entries: []*pbEntry{{Key: "k"}}}}})
	if err != nil || unknown.OverallCode != pb.RateLimitResponse_OK || unknown.Statuses[0].CurrentLimit != nil {
		t.Errorf("an unknown domain: %v, %v; want OK without a limit", unknown, err)
	}
	if code, body := getBody(t, "http://"+h+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck = %d %q, want 200 OK", code, body)
	}
	want := "basic.key1: unit=SECOND requests_per_unit=50, shadow_mode: false, quota_mode: false\n" +
		"basic.block: unit=MINUTE requests_per_unit=0, shadow_mode: false, quota_mode: false\n"
	if code, body := getBody(t, "http://"+d+"/rlconfig"); code != 200 || body != want {
		t.Errorf("/rlconfig = %d %q, want %q", code, body, want)
	}
}

// TestRatelimitImageBadConfig: a configuration that fails at start-up
// leaves the service running and answering as envoyproxy/ratelimit does
// with no configuration, until the file is fixed (the watcher reloads it).
func TestRatelimitImageBadConfig(t *testing.T) {
	srv := redistest.Start(t)
	file := envoyproxyRuntime(t, srv, strings.Replace(envoyBasic, "second", "fortnight", 1))
	g, h, _ := startRatelimit(t)
	req := &pb.RateLimitRequest{Domain: "basic", Descriptors: []*pbDesc{{Entries: []*pbEntry{{Key: "key1", Value: "a"}}}}}
	_, err := ask(t, g, req)
	if st := status.Convert(err); st.Code() != codes.Unknown || st.Message() != "no rate limit configuration loaded" {
		t.Fatalf("with no configuration: %v; want UNKNOWN: no rate limit configuration loaded", err)
	}
	raw, _ := protojson.Marshal(req)
	r, err := http.Post("http://"+h+"/json", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 400 {
		t.Errorf("/json with no configuration = %d, want 400", r.StatusCode)
	}
	if err := os.WriteFile(file, []byte(envoyBasic), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := ask(t, g, req)
		if err == nil && resp.OverallCode == pb.RateLimitResponse_OK && resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fixed file was not loaded: %v, %v", resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRLSCompatFlags: the compatibility flags refuse what they cannot mean.
func TestRLSCompatFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--compat", "envoyprox"},
		{"--reset", "exact"},
		{"--compat", "envoyproxy", "--reset", "nanos"},
		{"--headers", "envoyproxy"},
		{"--headers", "x-ratelimit"},
		{"--counting", "some"},
		{"--stop-increment-over-limit"},
		{"--shadow-mode"},
		{"--compat", "envoyproxy", "--envoyproxy-header-names", "A,B"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"rls", "--config", "../../examples/envoy/config"}, args...), &out, &errOut)
		if exitCode(err) != 2 {
			t.Errorf("rls %v: exit %d (%v), want 2", args, exitCode(err), err)
		}
	}
}
