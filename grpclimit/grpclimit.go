// Package grpclimit is Portero's gRPC door: unary and stream server
// interceptors over the same engine and the same policy rules as httplimit.
//
// It only translates. For each call it builds a policy.Request — the full
// method name "/pkg.Service/Method" as the path (so a rule's Match.Path
// "/pkg.Service/*" selects a service, with the wildcards of any path),
// POST as the method (gRPC is always POST on the wire), :authority as the
// host, the metadata the rules read as headers (lower-case metadata, under
// the canonical names the rules spell: x-api-key is header:X-Api-Key), the
// peer's address, behind trusted proxies read from x-forwarded-for metadata
// exactly as package clientip reads the HTTP header, and the identity the
// application set in the context (policy.WithIdentity: API key, tenant,
// user) — has policy.Compile and engine.Admit decide it, and answers in
// gRPC's own terms:
//
//   - refused by a rule: codes.ResourceExhausted, with google.rpc.RetryInfo
//     (the exact wait, to the millisecond) and google.rpc.QuotaFailure (one
//     violation per rule that refused, its description the sentence the
//     HTTP doors write in their problem detail) in the status details, and
//     the grpc-retry-pushback-ms trailer, so that grpc-go's own retry policy
//     waits as told;
//   - a cost that can never pass: codes.ResourceExhausted whose
//     QuotaFailure says so, with no RetryInfo and grpc-retry-pushback-ms -1,
//     which tells a gRPC client's retry policy not to retry at all;
//   - refused for the service's own sake (the store down under
//     OnStoreError deny, a service-wide concurrency limit full, and
//     shedding, see Shed): codes.Unavailable with RetryInfo, as HTTP
//     answers 503;
//   - a cost that cannot be read (malformed cost metadata): codes.InvalidArgument;
//   - allowed: the handler runs, with ratelimit-policy and ratelimit
//     (draft-ietf-httpapi-ratelimit-headers-11) in the response header
//     metadata, as engine/header writes them for every door.
//
// A refusal is a Trailers-Only response (one HEADERS frame on the wire),
// which is what grpc-go's retry requires before it looks at the pushback;
// its ratelimit fields are therefore in the trailer metadata.
//
// Concurrency rules hold their lease for the life of the call or the
// stream, renewed while it runs (engine.Keeper) and given back however it
// ends: returned, canceled, past its deadline, or panicking in the handler
// (a deferred release; grpc-go's server does not recover panics, so a
// recovery interceptor outside this one keeps the process alive). A rule
// whose cost the handler reports (response-header:NAME) reserves when it
// decides and is settled with the header or trailer metadata NAME that the
// handler sets (grpc.SetHeader, grpc.SetTrailer, the stream's SetHeader and
// SetTrailer); a rule of Responses counts the calls whose status maps to
// one of its HTTP statuses (google.rpc.Code's mapping: Unauthenticated is
// 401, PermissionDenied 403, ResourceExhausted 429, Unavailable 503 …).
//
// Config.Messages limits what a client streams: each message a stream
// handler receives is decided by those rules, and when refused, RecvMsg
// waits for the rule's retry time (backpressure: HTTP/2 flow control then
// slows the client) within the call's deadline instead of ending the
// stream.
//
// Leaky-queue rules hold an admitted call for its place in the queue, as
// the middleware does: a place that would depart after the call's deadline
// is refused, and a call canceled while held gives back what it counted.
// httplimit's Shapes (nginx's delay=N) and Queues (a wait for a concurrency
// slot) have no gRPC form yet.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
	"github.com/portero-rl/portero/policy"
)

// Config configures a Limiter. Policy and Store are required; every other
// field's zero value is the documented default.
type Config struct {
	// Policy holds the rules of calls. Required.
	Policy *policy.Policy
	// Store keeps the counters. Required. The Limiter does not close it.
	Store portero.Store
	// ClientIP says how to find the client address: the zero value uses the
	// peer's address and ignores forwarding metadata; with TrustedProxies,
	// the forwarding header (X-Forwarded-For unless Header says otherwise)
	// is read from its lower-case metadata when the peer is one of them.
	ClientIP clientip.Config
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnStoreError is the failure policy when the store fails, as in
	// httplimit: FailAllow (the default when empty), FailDeny
	// (codes.Unavailable), FailLocal. FailError is refused: the
	// interceptor has no caller of its own to report an error to.
	OnStoreError portero.FailurePolicy
	// LocalShare is the share of each limit one instance admits under
	// FailLocal, in (0, 1]; 0 means 1.
	LocalShare float64
	// Leases hands out the leases of concurrency rules; nil means Store.
	Leases portero.LeaseStore
	// LeaseRetryAfter is the longest retry time of a refusal by a
	// concurrency rule; 0 means 1 s.
	LeaseRetryAfter time.Duration
	// Messages, when not nil, holds rules that count each message a client
	// streams to the server: a refused message waits (RecvMsg returns when
	// it is admitted). Its keys see the same request as the call's rules,
	// plus the identity StreamIdentity, unique to each stream, for limits
	// per stream (key identity:stream). Its rules must be rate rules.
	Messages *policy.Policy
	// OnDecision, when not nil, is called after every decision of a call
	// (not of a message) with the verdict; it must be fast and safe for
	// concurrent use. The verdict is reused once it returns.
	OnDecision func(ctx context.Context, method string, v *engine.Verdict)
	// OnError, when not nil, is called when a call could not be decided
	// normally: a store failure (the failure policy answered), an unusable
	// cost, a failed renewal or settlement.
	OnError func(ctx context.Context, method string, err error)
}

// StreamIdentity is the identity name under which Config.Messages' rules see
// a value unique to each stream (key identity:stream: a limit per stream).
const StreamIdentity = "stream"

// Limiter holds the interceptors. It is immutable and safe for concurrent
// use.
type Limiter struct {
	cfg     Config
	engine  *engine.Engine
	writer  *header.Writer
	headers []metadataName // the request headers the rules read
	resp    []metadataName // the response headers costs come from
	length  bool           // some rule costs the request's bytes
	msgs    *messages      // nil without Config.Messages
}

// metadataName is a header a rule reads, under its canonical name and as
// lower-case metadata.
type metadataName struct{ canonical, key string }

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	switch {
	case cfg.Policy == nil:
		return nil, errors.New("grpclimit: Config.Policy is required")
	case cfg.Store == nil:
		return nil, errors.New("grpclimit: Config.Store is required")
	case cfg.OnStoreError == portero.FailError:
		return nil, errors.New("grpclimit: OnStoreError error: the interceptor has no caller to report an error to; want allow, deny or local")
	}
	if err := cfg.ClientIP.Validate(); err != nil {
		return nil, fmt.Errorf("grpclimit: client ip: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e, err := engine.New(engine.Options{Store: cfg.Store, OnError: cfg.OnStoreError, LocalShare: cfg.LocalShare,
		Leases: cfg.Leases, LeaseRetryAfter: cfg.LeaseRetryAfter})
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	read := cfg.Policy.RequestHeaders()
	if cfg.Messages != nil {
		for _, h := range cfg.Messages.RequestHeaders() {
			if !slices.Contains(read, h) {
				read = append(read, h)
			}
		}
	}
	l := &Limiter{cfg: cfg, engine: e, headers: names(read), resp: names(cfg.Policy.ResponseHeaders())}
	rules := make([]*engine.Rule, 0, len(cfg.Policy.Rules()))
	for _, r := range cfg.Policy.Rules() {
		if r.IsConcurrency() && e.Leases() == nil {
			return nil, fmt.Errorf("grpclimit: rule %q is a concurrency limit and the store keeps no leases: set Config.Leases", r.Name)
		}
		l.length = l.length || r.Cost.String() == "content-length"
		rules = append(rules, r.Engine())
	}
	l.writer = header.NewWriter(rules, false)
	if cfg.Messages != nil {
		if l.msgs, err = newMessages(cfg.Messages, e); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func names(canonical []string) []metadataName {
	out := make([]metadataName, len(canonical))
	for i, c := range canonical {
		out[i] = metadataName{canonical: c, key: lower(c)}
	}
	return out
}

// lower is strings.ToLower for ASCII header names.
func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// scratch is the memory one call needs to be decided, pooled.
type scratch struct {
	req    policy.Request
	hdr    map[string][]string
	hits   []engine.Hit
	keys   []byte
	v      engine.Verdict
	fields []header.Field
	buf    []byte
	now    time.Time // the decision's instant
}

var scratchPool = sync.Pool{New: func() any { return &scratch{} }}

func (s *scratch) release() {
	s.req = policy.Request{}
	clear(s.hdr)
	s.hits = s.hits[:0]
	scratchPool.Put(s)
}

// Request builds the policy.Request of a call to method with incoming
// metadata in ctx, as the interceptors do; msg is the request message of a
// unary call (its size is the content length, for rules whose cost is
// content-length), nil for a stream.
func (l *Limiter) Request(ctx context.Context, method string, msg any) *policy.Request {
	s := &scratch{}
	l.fill(ctx, s, method, msg)
	return &s.req
}

// fill sets s.req for a call.
func (l *Limiter) fill(ctx context.Context, s *scratch, method string, msg any) {
	var remote string
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	ip, fwd := l.cfg.ClientIP.ResolveFrom(remote, func(name string) []string {
		return metadata.ValueFromIncomingContext(ctx, lower(name))
	})
	for _, n := range l.headers {
		if v := metadata.ValueFromIncomingContext(ctx, n.key); len(v) > 0 {
			if s.hdr == nil {
				s.hdr = make(map[string][]string, len(l.headers))
			}
			s.hdr[n.canonical] = v
		}
	}
	s.req = policy.Request{Method: "POST", Path: method, Header: s.hdr, ClientIP: ip, ContentLength: -1,
		Identity: policy.Identity(ctx), Forwarded: fwd}
	if a := metadata.ValueFromIncomingContext(ctx, ":authority"); len(a) > 0 {
		s.req.Host = a[0]
	}
	if m, ok := msg.(proto.Message); ok && l.length {
		s.req.ContentLength = int64(proto.Size(m))
	}
}

// decide decides a call to method at now and writes its answer's metadata:
// the ratelimit fields in the header when allowed (nil error), or a
// refusal's trailer and status error.
func (l *Limiter) decide(ctx context.Context, s *scratch, method string, msg any) error {
	l.fill(ctx, s, method, msg)
	var err error
	s.hits, s.keys, err = l.cfg.Policy.Compile(&s.req, s.hits[:0], s.keys)
	s.now = l.cfg.Now()
	if err == nil {
		bound(ctx, s.hits)
		err = l.engine.Admit(ctx, s.now, s.hits, &s.v)
	}
	if err != nil {
		l.report(ctx, method, err)
		var re *policy.RuleError
		if errors.As(err, &re) {
			return status.Error(codes.InvalidArgument, re.Error())
		}
		return status.Error(codes.Internal, "rate limiter: "+err.Error()) // a bug: the failure policy answers store failures
	}
	v := &s.v
	if v.Degraded != nil {
		l.report(ctx, method, v.Degraded)
	}
	if l.cfg.OnDecision != nil {
		l.cfg.OnDecision(ctx, method, v)
	}
	s.fields, s.buf = l.writer.Append(s.fields[:0], s.buf[:0], v)
	md := fieldsMetadata(s.fields, s.buf)
	if v.Allowed {
		if len(md) > 0 {
			_ = grpc.SetHeader(ctx, md) // fails only outside a gRPC server (a direct call in a test)
		}
		return nil
	}
	st := Refusal(v)
	if md == nil {
		md = metadata.MD{}
	}
	md[PushbackKey] = []string{pushback(v)}
	_ = grpc.SetTrailer(ctx, md)
	return st.Err()
}

func (l *Limiter) report(ctx context.Context, method string, err error) {
	if l.cfg.OnError != nil {
		l.cfg.OnError(ctx, method, err)
	}
}

// onError returns Config.OnError for a call, or nil.
func (l *Limiter) onError(ctx context.Context, method string) func(error) {
	if l.cfg.OnError == nil {
		return nil
	}
	return func(err error) { l.cfg.OnError(ctx, method, err) }
}

// fieldsMetadata turns the header fields of a verdict into metadata: the
// two RateLimit fields under their lower-case names. Retry-After is said
// in gRPC's own terms (RetryInfo, the pushback trailer) instead.
func fieldsMetadata(fields []header.Field, buf []byte) metadata.MD {
	var md metadata.MD
	for _, f := range fields {
		var key string
		switch f.Name {
		case header.RateLimitPolicy:
			key = "ratelimit-policy"
		case header.RateLimit:
			key = "ratelimit"
		default:
			continue
		}
		if md == nil {
			md = make(metadata.MD, 2)
		}
		md[key] = append(md[key], f.Value(buf))
	}
	return md
}

// bound sets the MaxDelay of the enforced queue hits of a call with a
// deadline to the time left, so that the engine refuses a place that would
// depart after it.
func bound(ctx context.Context, hits []engine.Hit) {
	dl, ok := ctx.Deadline()
	if !ok {
		return
	}
	for i := range hits {
		if h := &hits[i]; h.Rule.Algorithm == portero.LeakyQueue && !h.Rule.Shadow {
			h.MaxDelay = max(time.Until(dl), 1)
		}
	}
}

// hold waits for the departure of an admitted call's place in a queue
// rule (the longest Decision.Delay of its hits), within ctx.
func hold(ctx context.Context, v *engine.Verdict) error {
	var delay time.Duration
	for i := range v.Results {
		delay = max(delay, v.Results[i].Decision.Delay)
	}
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// admit decides a call and, when it is allowed, returns what the call
// holds until it ends: its leases' keeper and the settlements it owes.
func (l *Limiter) admit(ctx context.Context, method string, msg any) (*call, error) {
	s := scratchPool.Get().(*scratch)
	defer s.release()
	if err := l.decide(ctx, s, method, msg); err != nil {
		return nil, err
	}
	c := &call{l: l, ctx: ctx, method: method, keeper: engine.Keep(ctx, s.v.Held(), l.cfg.Now, l.onError(ctx, method))}
	if err := hold(ctx, &s.v); err != nil {
		c.end()
		// Canceled before it ran: the call counts in no rule.
		if err := l.engine.Settle(context.WithoutCancel(ctx), l.cfg.Now(), s.v.Refunds(s.now, nil)); err != nil && !errors.Is(err, portero.ErrNotAdjustable) {
			l.report(ctx, method, err)
		}
		return nil, err
	}
	if p := l.cfg.Policy; p.Settles() {
		if c.pending = p.Pending(&s.v, l.cfg.Now(), nil); len(c.pending) > 0 {
			c.req = s.req
			c.req.Header = cloneHeader(s.req.Header) // the pooled map is cleared on release
		}
	}
	if l.msgs != nil {
		c.req = s.req
		c.req.Header = cloneHeader(s.req.Header)
	}
	return c, nil
}

func cloneHeader(h map[string][]string) map[string][]string {
	if h == nil {
		return nil
	}
	out := make(map[string][]string, len(h))
	for k, v := range h {
		out[k] = v
	}
	return out
}

// call is an admitted call until it ends.
type call struct {
	l       *Limiter
	ctx     context.Context
	method  string
	keeper  *engine.Keeper
	pending []policy.Settlement
	req     policy.Request // for the settlements and the message rules
}

// end gives the leases back.
func (c *call) end() { c.keeper.Release() }

// Unary is the unary server interceptor: grpc.ChainUnaryInterceptor(l.Unary).
func (l *Limiter) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c, err := l.admit(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	defer c.end()
	if len(c.pending) == 0 {
		return handler(ctx, req)
	}
	rec := &recorder{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	resp, err := handler(grpc.NewContextWithServerTransportStream(ctx, rec), req)
	var n int64
	if m, ok := resp.(proto.Message); ok && err == nil {
		n = int64(proto.Size(m))
	}
	c.settle(rec, err, n)
	return resp, err
}

// Stream is the stream server interceptor: grpc.ChainStreamInterceptor(l.Stream).
func (l *Limiter) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	c, err := l.admit(ctx, info.FullMethod, nil)
	if err != nil {
		return err
	}
	defer c.end()
	if len(c.pending) == 0 && l.msgs == nil {
		return handler(srv, ss)
	}
	ws := &stream{ServerStream: ss, ctx: ctx}
	if len(c.pending) > 0 {
		ws.rec = &recorder{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
		ws.ctx = grpc.NewContextWithServerTransportStream(ctx, ws.rec)
	}
	if l.msgs != nil {
		if ws.gate, err = l.msgs.gate(ctx, &c.req); err != nil {
			l.report(ctx, info.FullMethod, err)
			return status.Error(codes.InvalidArgument, err.Error())
		}
		ws.now = l.cfg.Now
	}
	err = handler(srv, ws)
	if ws.rec != nil {
		c.settle(ws.rec, err, ws.sent)
	}
	return err
}
