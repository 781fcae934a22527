package bench

// Tests of h2Client (h2client_test.go) against Portero's gRPC server: its
// decisions must be the grpc-go client's, server errors must come back
// with their code, the closed loop of Run must keep HTTP/2 flow control
// and MAX_CONCURRENT_STREAMS, and a dead server must not hang it.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	gubernator "github.com/gubernator-io/gubernator/v2"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/portero-rl/portero/internal/rls"
	"github.com/portero-rl/portero/store/memstore"
)

const h2TestConfig = `
domain: h2test
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: fast
    rate_limit: {unit: second, requests_per_unit: 1000000}
`

// startTestRLS runs Portero's RLS (memory store, h2TestConfig, the clock
// fixed at now unless now is zero) with serve on 127.0.0.1 and returns its
// address and a func that stops it.
func startTestRLS(t *testing.T, serve rlsServeFunc, now time.Time) (string, func()) {
	t.Helper()
	st, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	so := rls.ServiceOptions{}
	if !now.IsZero() {
		so.Now = func() time.Time { return now }
	}
	return startRLS(t, st, h2TestConfig, so, serve)
}

func rlsRequest(domain string, kv ...string) *pb.RateLimitRequest {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &pb.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}}
}

func mustFrame(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return grpcFrame(b)
}

// rlsTransports are the server transports the raw client is checked
// against.
func rlsTransports() map[string]rlsServeFunc {
	ts := map[string]rlsServeFunc{"grpc-go": serveGRPCGo}
	if serveLean != nil {
		ts["lean"] = serveLean
	}
	return ts
}

func TestH2ClientMatchesGRPCGo(t *testing.T) {
	for name, serve := range rlsTransports() {
		t.Run(name, func(t *testing.T) {
			// A fixed clock: every response, headers and
			// duration_until_reset included, is reproducible.
			addr, stop := startTestRLS(t, serve, time.Unix(1_800_000_000, 100_000_000))
			defer stop()
			raw, err := h2Dial(addr, pb.RateLimitService_ShouldRateLimit_FullMethodName, h2Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			gc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer gc.Close()
			gg := pb.NewRateLimitServiceClient(gc)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			viaRaw := func(req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
				b, err := raw.Do(ctx, mustFrame(t, req))
				if err != nil {
					return nil, err
				}
				resp := new(pb.RateLimitResponse)
				if err := proto.Unmarshal(b, resp); err != nil {
					t.Fatalf("raw response: %v", err)
				}
				return resp, nil
			}
			viaGRPC := func(req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
				return gg.ShouldRateLimit(ctx, req)
			}

			// One key, 3 per hour, the two clients taking turns: each
			// sees the other's calls counted.
			want := []struct {
				code      pb.RateLimitResponse_Code
				remaining uint32
			}{{pb.RateLimitResponse_OK, 2}, {pb.RateLimitResponse_OK, 1}, {pb.RateLimitResponse_OK, 0},
				{pb.RateLimitResponse_OVER_LIMIT, 0}, {pb.RateLimitResponse_OVER_LIMIT, 0}, {pb.RateLimitResponse_OVER_LIMIT, 0}}
			for i, w := range want {
				via, do := "raw", viaRaw
				if i%2 == 1 {
					via, do = "grpc-go", viaGRPC
				}
				resp, err := do(rlsRequest("h2test", "client", "shared"))
				if err != nil {
					t.Fatalf("call %d (%s): %v", i+1, via, err)
				}
				if resp.OverallCode != w.code || len(resp.Statuses) != 1 || resp.Statuses[0].LimitRemaining != w.remaining {
					t.Fatalf("call %d (%s): %v, want %v with %d remaining", i+1, via, resp, w.code, w.remaining)
				}
			}

			// Two keys, five calls each: the same responses, field by
			// field (headers, limits, durations).
			for i := range 5 {
				r, err := viaRaw(rlsRequest("h2test", "client", "by-raw"))
				if err != nil {
					t.Fatalf("raw call %d: %v", i+1, err)
				}
				g, err := viaGRPC(rlsRequest("h2test", "client", "by-grpc"))
				if err != nil {
					t.Fatalf("grpc-go call %d: %v", i+1, err)
				}
				if !proto.Equal(r, g) {
					t.Fatalf("call %d: raw %v, grpc-go %v", i+1, r, g)
				}
				if i == 4 && r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("call 5: %v, want OVER_LIMIT", r)
				}
			}

			// Errors come back with their code and message.
			for _, req := range []*pb.RateLimitRequest{
				rlsRequest("nope", "client", "x"),         // NOT_FOUND
				rlsRequest("n\u00f6pe%\t", "client", "x"), // NOT_FOUND, a message to percent-encode
				{Domain: "h2test"},                        // INVALID_ARGUMENT: no descriptors
			} {
				_, rerr := viaRaw(req)
				_, gerr := viaGRPC(req)
				if gerr == nil {
					if rerr != nil {
						t.Errorf("%v: raw %v, grpc-go OK", req, rerr)
					}
					continue
				}
				var se *h2StatusError
				if !errors.As(rerr, &se) {
					t.Fatalf("%v: raw error %v, want grpc-status %d", req, rerr, status.Code(gerr))
				}
				if codes.Code(se.Code) != status.Code(gerr) || se.Msg != status.Convert(gerr).Message() {
					t.Errorf("%v: raw grpc-status %d %q, grpc-go %v", req, se.Code, se.Msg, gerr)
				}
			}
			var se *h2StatusError
			if _, err := viaRaw(rlsRequest("nope", "client", "x")); !errors.As(err, &se) || se.Code != int(codes.NotFound) {
				t.Errorf("unknown domain: %v, want grpc-status 5 (NOT_FOUND)", err)
			}
		})
	}
}

func TestH2ClientRun(t *testing.T) {
	for name, serve := range rlsTransports() {
		t.Run(name, func(t *testing.T) {
			addr, stop := startTestRLS(t, serve, time.Time{})
			defer stop()
			bodies := make([][]byte, 100)
			for i := range bodies {
				bodies[i] = mustFrame(t, rlsRequest("h2test", "fast", "k"+strconv.Itoa(i)))
			}
			for _, o := range []struct {
				name string
				opts h2Options
			}{
				{"default windows", h2Options{}},
				// Windows smaller than a response: the server must wait
				// for the client's WINDOW_UPDATEs, on the stream and on
				// the connection.
				{"tiny windows", h2Options{StreamWindow: 16, ConnWindow: 65535}},
			} {
				c, err := h2Dial(addr, pb.RateLimitService_ShouldRateLimit_FullMethodName, o.opts)
				if err != nil {
					t.Fatal(err)
				}
				var i, sent int
				next := func() []byte {
					b := bodies[i%len(bodies)]
					i++
					sent += len(b)
					return b
				}
				var checked atomic.Int64
				check := func(msg []byte) error {
					checked.Add(1)
					if err := porteroCheck(msg); err != nil {
						return err
					}
					resp := new(pb.RateLimitResponse)
					if err := proto.Unmarshal(msg, resp); err != nil {
						return err
					}
					if resp.OverallCode != pb.RateLimitResponse_OK || len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1000000 {
						return errors.New("unexpected response " + resp.String())
					}
					return nil
				}
				// Runs until more than three times the initial windows
				// went each way, so that both sides' WINDOW_UPDATEs
				// were needed.
				var lats int
				for begin := time.Now(); sent < 3*65535 && time.Since(begin) < 30*time.Second; {
					res, err := c.Run(16, 200*time.Millisecond, next, check)
					if err != nil {
						t.Fatalf("%s: Run: %v", o.name, err)
					}
					if res.Errs != 0 {
						t.Fatalf("%s: %d errors, the first: %v", o.name, res.Errs, res.FirstErr)
					}
					for _, l := range res.Lats {
						if l <= 0 || l > 5*time.Second {
							t.Fatalf("%s: latency %v", o.name, l)
						}
					}
					lats += len(res.Lats)
				}
				if lats != i || int64(i) != checked.Load() || sent < 3*65535 {
					t.Fatalf("%s: %d latencies, %d calls, %d checked, %d bytes sent", o.name, lats, i, checked.Load(), sent)
				}
				// Refusals by check are errors.
				res, err := c.Run(4, 50*time.Millisecond, next, func([]byte) error { return errors.New("refused") })
				if err != nil || res.Errs == 0 || res.Errs != int64(len(res.Lats)) || res.FirstErr == nil || res.FirstErr.Error() != "refused" {
					t.Fatalf("%s: refusing check: %d errors in %d calls, %v, %v", o.name, res.Errs, len(res.Lats), res.FirstErr, err)
				}
				c.Close()
			}
		})
	}
}

// TestH2ClientMaxConcurrentStreams: the server allows 2 streams and
// refuses more (RST_STREAM REFUSED_STREAM); 16 wanted in flight must not
// cause a single error.
func TestH2ClientMaxConcurrentStreams(t *testing.T) {
	serve := func(ctx context.Context, lis net.Listener, svc *rls.Service, grace time.Duration) error {
		return rls.Serve(ctx, lis, svc, rls.ServerOptions{ShutdownGrace: grace, MaxConcurrentStreams: 2})
	}
	addr, stop := startTestRLS(t, serve, time.Time{})
	defer stop()
	c, err := h2Dial(addr, pb.RateLimitService_ShouldRateLimit_FullMethodName, h2Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := mustFrame(t, rlsRequest("h2test", "fast", "k"))
	res, err := c.Run(16, 200*time.Millisecond, func() []byte { return body }, porteroCheck)
	if err != nil || res.Errs != 0 || len(res.Lats) < 10 {
		t.Fatalf("Run: %v; %d errors in %d calls, the first: %v", err, res.Errs, len(res.Lats), res.FirstErr)
	}
	c.mu.Lock()
	ms := c.maxStreams
	c.mu.Unlock()
	if ms != 2 {
		t.Fatalf("MAX_CONCURRENT_STREAMS %d, want 2", ms)
	}
}

// TestH2ClientServerGone: calls on a connection whose server stopped fail
// instead of hanging.
func TestH2ClientServerGone(t *testing.T) {
	for name, serve := range rlsTransports() {
		t.Run(name, func(t *testing.T) {
			addr, stop := startTestRLS(t, serve, time.Time{})
			c, err := h2Dial(addr, pb.RateLimitService_ShouldRateLimit_FullMethodName, h2Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			body := mustFrame(t, rlsRequest("h2test", "fast", "k"))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := c.Do(ctx, body); err != nil {
				t.Fatal(err)
			}
			stop()
			if _, err := c.Do(ctx, body); err == nil || ctx.Err() != nil {
				t.Fatalf("Do after the server stopped: %v (context: %v)", err, ctx.Err())
			}
			res, err := c.Run(4, 100*time.Millisecond, func() []byte { return body }, nil)
			if err == nil {
				t.Fatalf("Run after the server stopped: no error, %d calls", len(res.Lats))
			}
		})
	}
}

// TestH2ClientGubernator: the raw client's GetRateLimits answers are the
// grpc-go client's.
func TestH2ClientGubernator(t *testing.T) {
	addr, stop := serveGubernator(t)
	defer stop()
	raw, err := h2Dial(addr, gubernator.V1_GetRateLimits_FullMethodName, h2Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	gc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	gg := gubernator.NewV1Client(gc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := func(key string) *gubernator.GetRateLimitsReq {
		return &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{{
			Name: "h2test", UniqueKey: key, Hits: 1, Limit: 3, Duration: 3_600_000,
			Algorithm: gubernator.Algorithm_TOKEN_BUCKET,
		}}}
	}
	for i := range 5 {
		b, err := raw.Do(ctx, mustFrame(t, req("by-raw")))
		if err != nil {
			t.Fatalf("raw call %d: %v", i+1, err)
		}
		if err := gubernatorCheck(b); err != nil {
			t.Fatalf("raw call %d: %v", i+1, err)
		}
		r := new(gubernator.GetRateLimitsResp)
		if err := proto.Unmarshal(b, r); err != nil {
			t.Fatal(err)
		}
		g, err := gg.GetRateLimits(ctx, req("by-grpc"))
		if err != nil {
			t.Fatalf("grpc-go call %d: %v", i+1, err)
		}
		rr, gr := r.Responses[0], g.Responses[0]
		if rr.Status != gr.Status || rr.Remaining != gr.Remaining || rr.Limit != gr.Limit || rr.Error != gr.Error {
			t.Fatalf("call %d: raw %v, grpc-go %v", i+1, rr, gr)
		}
		if i == 4 && rr.Status != gubernator.Status_OVER_LIMIT {
			t.Fatalf("call 5: %v, want OVER_LIMIT", rr)
		}
	}
}

// The response checks of the report accept what the servers answer and
// refuse what they must not.
func TestResponseChecks(t *testing.T) {
	m := func(msg proto.Message) []byte {
		b, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		msg  []byte
		ok   bool
		what string
	}{
		{m(&pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}), true, "OK"},
		{m(&pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{LimitRemaining: 3}}}), true, "OVER_LIMIT"},
		{m(&pb.RateLimitResponse{}), false, "UNKNOWN"},
		{[]byte{0x08}, false, "truncated"},
	} {
		if err := porteroCheck(tc.msg); (err == nil) != tc.ok {
			t.Errorf("porteroCheck(%s) = %v", tc.what, err)
		}
	}
	for _, tc := range []struct {
		msg  []byte
		ok   bool
		what string
	}{
		{m(&gubernator.GetRateLimitsResp{Responses: []*gubernator.RateLimitResp{{Limit: 3, Remaining: 2}}}), true, "under"},
		{m(&gubernator.GetRateLimitsResp{Responses: []*gubernator.RateLimitResp{{Status: gubernator.Status_OVER_LIMIT, Limit: 3, Metadata: map[string]string{"a": "b"}}}}), true, "over"},
		{m(&gubernator.GetRateLimitsResp{Responses: []*gubernator.RateLimitResp{{Error: "boom"}}}), false, "error"},
		{m(&gubernator.GetRateLimitsResp{}), false, "no response"},
		{[]byte{0x0a, 0x05, 0x08}, false, "truncated"},
	} {
		if err := gubernatorCheck(tc.msg); (err == nil) != tc.ok {
			t.Errorf("gubernatorCheck(%s) = %v", tc.what, err)
		}
	}
}

// TestH2ClientScriptedServer runs the client against a scripted HTTP/2
// server that does what grpc-go's server does not: no HPACK dynamic table
// (HEADER_TABLE_SIZE 0), a send window of 7 bytes per stream (requests must
// be split and wait for WINDOW_UPDATE), one stream at a time, a PING,
// response header blocks split into CONTINUATION frames, padded DATA, a
// message split across DATA frames, a trailers-only error, and GOAWAY.
func TestH2ClientScriptedServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	type report struct {
		err                      error
		pingAcked, settingsAcked bool
		requests, windowUpdates  int
		clientClosedAfterGoAway  bool
		maxDataFrame             int
	}
	done := make(chan report, 1)
	go func() {
		var r report
		defer func() { done <- r }()
		fail := func(format string, args ...any) { r.err = fmt.Errorf(format, args...) }
		conn, err := lis.Accept()
		if err != nil {
			fail("accept: %v", err)
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		pre := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(conn, pre); err != nil || string(pre) != http2.ClientPreface {
			fail("preface %q: %v", pre, err)
			return
		}
		fr := http2.NewFramer(conn, conn)
		fr.WriteSettings(
			http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: 7},
			http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1},
		)
		fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
		type stream struct {
			fields map[string]string
			body   []byte
		}
		streams := map[uint32]*stream{}
		var cur *stream
		dec := hpack.NewDecoder(0, func(f hpack.HeaderField) {
			if cur != nil {
				cur.fields[f.Name] = f.Value
			}
		})
		var hbuf bytes.Buffer
		enc := hpack.NewEncoder(&hbuf)
		block := func(fs ...string) []byte {
			hbuf.Reset()
			for i := 0; i+1 < len(fs); i += 2 {
				enc.WriteField(hpack.HeaderField{Name: fs[i], Value: fs[i+1]})
			}
			return bytes.Clone(hbuf.Bytes())
		}
		respond := func(id uint32, s *stream) {
			want := map[string]string{":method": "POST", ":scheme": "http", ":path": "/test.Echo/Do",
				":authority": lis.Addr().String(), "content-type": "application/grpc", "te": "trailers", "grpc-timeout": "1S"}
			for k, v := range want {
				if s.fields[k] != v {
					fail("stream %d: header %s = %q, want %q", id, k, s.fields[k], v)
				}
			}
			msg := s.body[5:]
			switch string(msg) {
			case "fail":
				// Trailers-only, split into HEADERS and CONTINUATION.
				b := block(":status", "200", "content-type", "application/grpc", "grpc-status", "7", "grpc-message", "no%20way%25")
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:2], EndStream: true})
				fr.WriteContinuation(id, true, b[2:])
			case "bye":
				fr.WriteGoAway(id-2, http2.ErrCodeNo, []byte("bye"))
			default:
				b := block(":status", "200", "content-type", "application/grpc")
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:1]})
				fr.WriteContinuation(id, false, b[1:2])
				fr.WriteContinuation(id, true, b[2:])
				out := grpcFrame(bytes.ToUpper(msg))
				fr.WriteDataPadded(id, false, out[:3], []byte{0, 0, 0})
				fr.WriteData(id, false, out[3:])
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block("grpc-status", "0"), EndStream: true, EndHeaders: true})
			}
		}
		goneAway := false
		for r.err == nil {
			f, err := fr.ReadFrame()
			if err != nil {
				if goneAway && errors.Is(err, io.EOF) {
					r.clientClosedAfterGoAway = true
				} else {
					fail("read: %v", err)
				}
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if f.IsAck() {
					r.settingsAcked = true
				} else {
					fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() || f.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
					fail("PING %v", f)
				}
				r.pingAcked = true
			case *http2.WindowUpdateFrame:
				r.windowUpdates++
			case *http2.HeadersFrame:
				if len(streams) >= 1 {
					fail("stream %d opened beside %d streams: MAX_CONCURRENT_STREAMS is 1", f.StreamID, len(streams))
					return
				}
				cur = &stream{fields: map[string]string{}}
				streams[f.StreamID] = cur
				if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
					fail("HPACK with no dynamic table: %v", err)
					return
				}
				if !f.HeadersEnded() || f.StreamEnded() {
					fail("HEADERS: end headers %v, end stream %v", f.HeadersEnded(), f.StreamEnded())
				}
			case *http2.DataFrame:
				s := streams[f.StreamID]
				if s == nil {
					fail("DATA on stream %d", f.StreamID)
					return
				}
				r.maxDataFrame = max(r.maxDataFrame, len(f.Data()))
				s.body = append(s.body, f.Data()...)
				if n := len(f.Data()); n > 0 {
					fr.WriteWindowUpdate(0, uint32(n))
					if !f.StreamEnded() {
						fr.WriteWindowUpdate(f.StreamID, uint32(n))
					}
				}
				if f.StreamEnded() {
					delete(streams, f.StreamID)
					r.requests++
					if len(s.body) < 5 || int(binary.BigEndian.Uint32(s.body[1:5])) != len(s.body)-5 {
						fail("stream %d: body %q", f.StreamID, s.body)
						return
					}
					if string(s.body[5:]) == "bye" {
						goneAway = true
					}
					respond(f.StreamID, s)
				}
			case *http2.RSTStreamFrame:
				delete(streams, f.StreamID)
			}
		}
	}()

	c, err := h2Dial(lis.Addr().String(), "/test.Echo/Do", h2Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// More calls than the server allows at once, each request longer
	// than its send window.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Sprintf("message number %d", i)
			got, err := c.Do(ctx, grpcFrame([]byte(msg)))
			if err == nil && string(got) != strings.ToUpper(msg) {
				err = fmt.Errorf("call %d: %q, want %q", i, got, strings.ToUpper(msg))
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var se *h2StatusError
	if _, err := c.Do(ctx, grpcFrame([]byte("fail"))); !errors.As(err, &se) || se.Code != 7 || se.Msg != "no way%" {
		t.Fatalf("trailers-only error: %v, want grpc-status 7 %q", err, "no way%")
	}
	if _, err := c.Do(ctx, grpcFrame([]byte("bye"))); err == nil || !strings.Contains(err.Error(), "GOAWAY") {
		t.Fatalf("call refused by GOAWAY: %v", err)
	}
	if _, err := c.Do(ctx, grpcFrame([]byte("after"))); err == nil || !strings.Contains(err.Error(), "GOAWAY") {
		t.Fatalf("call after GOAWAY: %v", err)
	}
	var r report
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the scripted server did not finish")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.pingAcked || !r.settingsAcked || r.requests != 10 || r.maxDataFrame > 7 || !r.clientClosedAfterGoAway {
		t.Fatalf("scripted server saw %+v", r)
	}
}
