package main

import (
	"bytes"
	"context"
	"fmt"
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

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/internal/server"
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
	m := startCommand(t, "ratelimit", argsOf(append([]string{"/bin/ratelimit"}, args...)),
		regexp.MustCompile(`gRPC listening on grpc://(\S+) \(\S+\)\n[\s\S]*HTTP listening on http://(\S+)\n[\s\S]*admin listening on http://(\S+) `))
	return m[1], m[2], m[3]
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

// TestRatelimitFlagsOverEnv: under envoyproxy/ratelimit's environment each
// of Portero's improvements is one flag on the command line (docs/envoy.md:
// "/bin/ratelimit --counting all-or-nothing"), though the environment sets
// settings that apply only to the mode the flag leaves (its expiry jitter,
// a key prefix); an environment setting that would change an answer the
// flag's mode cannot give is an error naming its variable.
func TestRatelimitFlagsOverEnv(t *testing.T) {
	base := []string{"RUNTIME_ROOT", "/srv/rt", "RUNTIME_SUBDIRECTORY", "ratelimit", "CACHE_KEY_PREFIX", "rl:",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true", "RUNTIME_IGNOREDOTFILES", "true"}
	cases := []struct {
		args []string
		env  []string
		// want: the counting, whether compat is on, its exact reset and
		// headers, the key prefix; or an error mentioning err.
		counting engine.Counting
		compat   bool
		exact    bool
		headers  rls.HeaderStyle
		prefix   string
		err      string
	}{
		{args: nil, counting: engine.CountEach, compat: true, headers: rls.HeadersNone, prefix: "rl:"},
		{args: []string{"--counting", "all-or-nothing"}, counting: engine.AllOrNothing, compat: true, headers: rls.HeadersNone, prefix: "rl:"},
		{args: []string{"--reset", "exact"}, counting: engine.CountEach, compat: true, exact: true, headers: rls.HeadersNone, prefix: "rl:"},
		{args: []string{"--headers", "ietf"}, counting: engine.CountEach, compat: true, headers: rls.HeadersIETF, prefix: "rl:"},
		{args: []string{"--compat", "off"}, counting: engine.AllOrNothing, headers: rls.HeadersNone},
		{args: []string{"--compat", "off", "--headers", "ietf"}, counting: engine.AllOrNothing, headers: rls.HeadersIETF},
		{args: []string{"--compat", "off"}, env: []string{"SHADOW_MODE", "true"}, err: "SHADOW_MODE"},
		{args: []string{"--compat", "off"}, env: []string{"RESPONSE_DYNAMIC_METADATA", "true"}, err: "RESPONSE_DYNAMIC_METADATA"},
		{args: []string{"--compat", "off"}, env: []string{"LIMIT_RESPONSE_HEADERS_ENABLED", "true"}, err: "LIMIT_RESPONSE_HEADERS_ENABLED"},
		{args: []string{"--compat", "off", "--headers", "ietf"}, env: []string{"LIMIT_RESPONSE_HEADERS_ENABLED", "true"}, counting: engine.AllOrNothing, headers: rls.HeadersIETF},
		{args: []string{"--compat", "off", "--cache-key-prefix", "x:"}, err: "--cache-key-prefix"},
		{args: []string{"--counting", "all-or-nothing", "--expiration-jitter", "1s"}, err: "--expiration-jitter"},
		{args: []string{"--no-headers", "--headers", "ietf"}, err: "--no-headers"},
		{args: []string{"--envoyproxy-header-names", "A, ,C"}, err: "not a header name"},
	}
	for _, c := range cases {
		cmd, f := rlsCommand()
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatal(err)
		}
		err := applyEnvoyproxyEnv(cmd, &f.compat, envOf(append(append([]string{}, base...), c.env...)...))
		var o server.EnvoyproxyOptions
		if err == nil {
			o, _, err = f.compat.options(f.noHeaders)
		}
		where := fmt.Sprintf("/bin/ratelimit %v with %v", c.args, c.env)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one mentioning %s", where, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		headers := rls.HeadersNone
		if o.Compat != nil {
			headers = o.Compat.Headers
		} else if _, noHeaders, _ := f.compat.options(f.noHeaders); !noHeaders {
			headers = rls.HeadersIETF
		}
		got := fmt.Sprintf("counting %s compat %v exact %v headers %s prefix %q stop %v", o.Counting, o.Compat != nil,
			o.Compat != nil && o.Compat.ExactReset, headers, o.KeyPrefix, o.StopIncrementWhenOver)
		want := fmt.Sprintf("counting %s compat %v exact %v headers %s prefix %q stop %v", c.counting, c.compat, c.exact, c.headers, c.prefix,
			c.counting == engine.CountEach)
		if got != want {
			t.Errorf("%s = %s, want %s", where, got, want)
		}
	}
}

// TestRatelimitEnvOptions: envoyproxy/ratelimit's answer settings in the
// environment become the EnvoyproxyOptions RunRLS takes, each one.
func TestRatelimitEnvOptions(t *testing.T) {
	cmd, f := rlsCommand()
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	env := envOf("RUNTIME_ROOT", "/srv/rt", "RUNTIME_SUBDIRECTORY", "ratelimit", "SHADOW_MODE", "true", "RESPONSE_DYNAMIC_METADATA", "true",
		"QUOTA_MODE", "true", "EXPIRATION_JITTER_MAX_SECONDS", "7", "CACHE_KEY_PREFIX", "p:", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true",
		"RUNTIME_IGNOREDOTFILES", "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true", "LIMIT_RESPONSE_HEADERS_ENABLED", "true",
		"LIMIT_LIMIT_HEADER", "X-L", "LIMIT_REMAINING_HEADER", "X-R", "LIMIT_RESET_HEADER", "X-T", "LOCAL_CACHE_SIZE_IN_BYTES", "1048576")
	if err := applyEnvoyproxyEnv(cmd, &f.compat, env); err != nil {
		t.Fatal(err)
	}
	o, noHeaders, err := f.compat.options(f.noHeaders)
	if err != nil {
		t.Fatal(err)
	}
	want := server.EnvoyproxyOptions{Compat: &rls.Compat{Headers: rls.HeadersEnvoyproxy, HeaderNames: [3]string{"X-L", "X-R", "X-T"}, Metadata: true},
		Counting: engine.CountEach, StopIncrementWhenOver: true, CounterJitter: 7 * time.Second, KeyPrefix: "p:", IgnoreDotFiles: true, QuotaMode: true, ShadowMode: true,
		HealthyWithConfig: true, LocalCacheSize: 1 << 20}
	if o.Compat == nil || *o.Compat != *want.Compat || noHeaders {
		t.Errorf("Compat = %+v (no headers %v), want %+v", o.Compat, noHeaders, want.Compat)
	}
	o.Compat, want.Compat = nil, nil
	if o != want {
		t.Errorf("options = %+v, want %+v", o, want)
	}
}

// TestRatelimitNoSubdirectory: without RUNTIME_SUBDIRECTORY
// envoyproxy/ratelimit loads no file and serves with no domains: every
// domain answers OK with no limit, and /healthcheck is OK (checked against
// its service_cmd).
func TestRatelimitNoSubdirectory(t *testing.T) {
	srv := redistest.Start(t)
	envoyproxyRuntime(t, srv, envoyBasic)
	os.Unsetenv("RUNTIME_SUBDIRECTORY") // t.Setenv restores it
	g, h, _ := startRatelimit(t)
	got, err := ask(t, g, &pb.RateLimitRequest{Domain: "basic", Descriptors: []*pbDesc{{Entries: []*pbEntry{{Key: "block", Value: "x"}}}}})
	want := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK}}}
	if err != nil || !proto.Equal(got, want) {
		t.Errorf("with no subdirectory: %v, %v; want %v", got, err, want)
	}
	if code, body := getBody(t, "http://"+h+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck = %d %q, want 200 OK", code, body)
	}
}

// TestRatelimitSentinel: REDIS_TYPE=sentinel with REDIS_URL
// "master,sentinel:port" counts on the master the sentinels name (the
// failover itself: redisstore TestSentinelFailover).
func TestRatelimitSentinel(t *testing.T) {
	sn := redistest.StartSentinel(t, 1, 1)
	envoyproxyRuntime(t, sn.Master, envoyBasic, "REDIS_TYPE", "sentinel", "REDIS_URL", sn.Name+","+sn.Addrs()[0])
	g, _, _ := startRatelimit(t)
	req := &pb.RateLimitRequest{Domain: "basic", Descriptors: []*pbDesc{{Entries: []*pbEntry{{Key: "block", Value: "s"}}}}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := ask(t, g, req)
		if err == nil {
			if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				t.Errorf("a blocked descriptor through the sentinels: %v", resp)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer through the sentinels: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if keys, err := redistest.Do(sn.Master.Addr(), "KEYS", "basic_block_s_*"); err != nil || keys == "" {
		t.Errorf("the master holds %q (%v), want envoyproxy/ratelimit's counter", keys, err)
	}
}
