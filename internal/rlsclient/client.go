// Package rlsclient asks a running Envoy rate limit service (Portero's or
// envoyproxy/ratelimit) over gRPC, with the descriptor compiler's types in
// and out: `portero check` and the tests of the RLS use it.
package rlsclient

import (
	"context"
	"crypto/tls"
	"fmt"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portero-rl/portero/descriptor"
)

// Client asks a running rate limit service (Portero or
// envoyproxy/ratelimit) over gRPC, in plaintext as Envoy does by default
// (Dial) or over TLS (DialTLS). It is safe for concurrent use; Close
// releases the connection.
type Client struct {
	conn *grpc.ClientConn
	rls  pb.RateLimitServiceClient
}

// Dial returns a client for target (host:port, or any gRPC target such as
// dns:///name:8081). It does not connect until the first call.
func Dial(target string) (*Client, error) {
	return dial(target, insecure.NewCredentials())
}

// DialTLS is Dial over TLS with cfg: the server's certificate checked
// against cfg.RootCAs (the system's when nil) for cfg.ServerName (the
// target's host when empty), and cfg.Certificates presented when the
// server asks for a client certificate (mTLS).
func DialTLS(target string, cfg *tls.Config) (*Client, error) {
	return dial(target, credentials.NewTLS(cfg))
}

func dial(target string, creds credentials.TransportCredentials) (*Client, error) {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("rlsclient: %w", err)
	}
	return &Client{conn: conn, rls: pb.NewRateLimitServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Header is one response header.
type Header struct{ Name, Value string }

// Answer is a ShouldRateLimit response without protobuf types.
type Answer struct {
	Code     descriptor.Code
	Statuses []AnswerStatus
	Headers  []Header
}

// AnswerStatus is one descriptor's status in an Answer.
type AnswerStatus struct {
	Code descriptor.Code
	// Name, RequestsPerUnit and Unit describe current_limit; Name is empty
	// when the service reported none.
	Name            string
	RequestsPerUnit uint32
	Unit            descriptor.Unit
	Remaining       uint32
	// ResetAfter is duration_until_reset.
	ResetAfter float64 // seconds
}

// ShouldRateLimit sends req and returns the answer; errors are the gRPC
// status errors of the call.
func (c *Client) ShouldRateLimit(ctx context.Context, req *descriptor.Request) (*Answer, error) {
	in := &pb.RateLimitRequest{Domain: req.Domain, HitsAddend: req.Hits}
	for _, d := range req.Descriptors {
		pd := &commonv3.RateLimitDescriptor{}
		for _, e := range d.Entries {
			pd.Entries = append(pd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		if d.Hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.Hits)
		}
		if o := d.Override; o != nil {
			pd.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: o.RequestsPerUnit, Unit: typev3.RateLimitUnit(o.Unit)}
		}
		in.Descriptors = append(in.Descriptors, pd)
	}
	out, err := c.rls.ShouldRateLimit(ctx, in)
	if err != nil {
		return nil, err
	}
	a := &Answer{Code: descriptor.Code(out.GetOverallCode())}
	for _, s := range out.GetStatuses() {
		as := AnswerStatus{Code: descriptor.Code(s.GetCode()), Remaining: s.GetLimitRemaining(), ResetAfter: s.GetDurationUntilReset().AsDuration().Seconds()}
		if l := s.GetCurrentLimit(); l != nil {
			as.Name, as.RequestsPerUnit, as.Unit = l.GetName(), l.GetRequestsPerUnit(), descriptor.Unit(l.GetUnit())
		}
		a.Statuses = append(a.Statuses, as)
	}
	for _, h := range out.GetResponseHeadersToAdd() {
		a.Headers = append(a.Headers, Header{h.GetKey(), h.GetValue()})
	}
	return a, nil
}
