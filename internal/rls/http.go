package rls

import (
	"context"
	"expvar"
	"fmt"
	"io"
	"net/http"
	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/portero-rl/portero/descriptor"
)

// envoyproxy/ratelimit's HTTP endpoints: POST /json (the rate limit call
// in proto3 JSON, for clients without gRPC), /healthcheck on the HTTP port,
// and /rlconfig, the loaded configuration, and /stats on its debug port.

// maxJSONBody bounds a /json request: the gRPC server's message cap.
const maxJSONBody = DefaultMaxRecvMsgSize

// JSONHandler serves envoyproxy/ratelimit's /json: the body is a
// RateLimitRequest in proto3 JSON, the answer the RateLimitResponse in
// proto3 JSON with status 200, or 429 when it is OVER_LIMIT; a body that
// does not decode, or a call that fails, is 400 with "Bad Request", as
// there (any method; a body larger than the gRPC message cap is 400 too).
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if err != nil {
			s.opts.Logger.Debug("rls: /json: body", "err", err)
			badRequest(w)
			return
		}
		var req pb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			s.opts.Logger.Debug("rls: /json: not a RateLimitRequest", "err", err)
			badRequest(w)
			return
		}
		resp, err := s.shouldRateLimitProto(r.Context(), &req)
		if err != nil {
			s.opts.Logger.Debug("rls: /json", "err", err)
			badRequest(w)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}

// shouldRateLimitProto is ShouldRateLimit on the generated types, through
// their bytes: /json is rare, and one codec serves every door.
func (s *Service) shouldRateLimitProto(ctx context.Context, in *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	msg, err := proto.Marshal(in)
	if err != nil {
		return nil, err
	}
	out, err := s.ShouldRateLimit(ctx, msg, nil)
	if err != nil {
		return nil, err
	}
	resp := new(pb.RateLimitResponse)
	return resp, proto.Unmarshal(out, resp)
}

func badRequest(w http.ResponseWriter) {
	http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
}

// HealthHandler serves envoyproxy/ratelimit's /healthcheck: 200 "OK"
// while healthy() says so, 500 with no body otherwise.
func HealthHandler(healthy func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "OK")
	})
}

// ConfigHandler serves envoyproxy/ratelimit's /rlconfig: one line per
// limit of the configuration limits() returns ("FULL_KEY: unit=SECOND
// requests_per_unit=10, shadow_mode: false, quota_mode: false"), domain by
// domain in name order and each tree in file order (envoyproxy/ratelimit
// prints them in Go's map order); nothing when no configuration is loaded.
func ConfigHandler(limits func() *descriptor.Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, DumpConfig(limits()))
	})
}

// DumpConfig formats c as envoyproxy/ratelimit's /rlconfig does.
func DumpConfig(c *descriptor.Config) string {
	var b strings.Builder
	c.Walk(func(_ *descriptor.Domain, n *descriptor.Node) {
		l := n.Limit
		if l == nil {
			return
		}
		unit := "UNKNOWN"
		if !l.Unlimited {
			unit = pb.RateLimitResponse_RateLimit_Unit(l.Unit).String()
		}
		fmt.Fprintf(&b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
			l.FullKey, unit, l.RequestsPerUnit, n.ShadowMode, n.QuotaMode)
	})
	return b.String()
}

// StatsHandler serves envoyproxy/ratelimit's /stats: every variable of the
// process's expvar, one "name: JSON value" line each (cmdline and
// memstats; its statistics themselves go to statsd, not to expvar).
func StatsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		expvar.Do(func(kv expvar.KeyValue) {
			fmt.Fprintf(w, "%s: %s\n", kv.Key, kv.Value)
		})
	})
}
