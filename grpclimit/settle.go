package grpclimit

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/portero-rl/portero/policy"
)

// Rules settled after the response (policy.Rule.Responses, a cost the
// handler reports): the interceptor watches the metadata the handler sets —
// through grpc.SetHeader and grpc.SetTrailer on its context, or the
// stream's SetHeader, SendHeader and SetTrailer — and its status, and
// settles with the engine once the handler returns (policy.Policy.Settle,
// engine.Engine.Settle, as the middleware does with an HTTP response).

// recorder is a grpc.ServerTransportStream that keeps a copy of the
// metadata the handler sends.
type recorder struct {
	grpc.ServerTransportStream
	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

func (r *recorder) keep(into *metadata.MD, md metadata.MD) {
	r.mu.Lock()
	*into = metadata.Join(*into, md)
	r.mu.Unlock()
}

func (r *recorder) SetHeader(md metadata.MD) error {
	r.keep(&r.header, md)
	return r.ServerTransportStream.SetHeader(md)
}

func (r *recorder) SendHeader(md metadata.MD) error {
	r.keep(&r.header, md)
	return r.ServerTransportStream.SendHeader(md)
}

func (r *recorder) SetTrailer(md metadata.MD) error {
	r.keep(&r.trailer, md)
	return r.ServerTransportStream.SetTrailer(md)
}

// response is what the handler answered, as the policy reads it: its
// status as google.rpc.Code's HTTP status, the metadata the rules take a
// cost from under their canonical names (header metadata first, then
// trailer), and the response messages' bytes.
func (r *recorder) response(names []metadataName, err error, bytes int64) *policy.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	resp := &policy.Response{Status: HTTPStatus(status.Code(err)), Bytes: bytes, Header: map[string][]string{}}
	for _, n := range names {
		if v := r.header[n.key]; len(v) > 0 {
			resp.Header[n.canonical] = v
		} else if v := r.trailer[n.key]; len(v) > 0 {
			resp.Header[n.canonical] = v
		}
	}
	return resp
}

// settle settles the call's pending hits with what the handler answered.
func (c *call) settle(rec *recorder, err error, bytes int64) {
	l := c.l
	resp := rec.response(l.resp, err, bytes)
	adj, perr := l.cfg.Policy.Settle(c.pending, &c.req, resp, nil)
	// The client may be gone; the settlement is still owed.
	eerr := l.engine.Settle(context.WithoutCancel(c.ctx), l.cfg.Now(), adj)
	for _, err := range []error{perr, eerr} {
		if err != nil {
			l.report(c.ctx, c.method, err)
		}
	}
}

// stream is the handler's view of a stream: the recorder's context and
// metadata methods for the settlements, the bytes sent, and the message
// rules' wait in RecvMsg.
type stream struct {
	grpc.ServerStream
	ctx  context.Context
	rec  *recorder // nil without settlements
	sent int64
	gate *messageGate // nil without message rules
	now  func() time.Time
}

func (s *stream) Context() context.Context { return s.ctx }

func (s *stream) SetHeader(md metadata.MD) error {
	if s.rec != nil {
		s.rec.keep(&s.rec.header, md)
	}
	return s.ServerStream.SetHeader(md)
}

func (s *stream) SendHeader(md metadata.MD) error {
	if s.rec != nil {
		s.rec.keep(&s.rec.header, md)
	}
	return s.ServerStream.SendHeader(md)
}

func (s *stream) SetTrailer(md metadata.MD) {
	if s.rec != nil {
		s.rec.keep(&s.rec.trailer, md)
	}
	s.ServerStream.SetTrailer(md)
}

func (s *stream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if pm, ok := m.(proto.Message); ok && err == nil && s.rec != nil {
		s.sent += int64(proto.Size(pm))
	}
	return err
}

// RecvMsg receives the next message and, under message rules, returns it
// only once they admit it: a refused message waits for its retry time
// (backpressure), within the call's deadline.
func (s *stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil || s.gate == nil {
		return err
	}
	return s.gate.wait(s.ctx, s.now)
}

var _ grpc.ServerStream = (*stream)(nil)
