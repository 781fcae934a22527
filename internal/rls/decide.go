package rls

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	hdr "github.com/portero-rl/portero/engine/header"
)

// answer is one decided request: the compiled plan, the engine's verdict,
// each descriptor's status and the header fields, everything both
// transports turn into a RateLimitResponse. It comes from answerPool and
// goes back once the response is written, so that a decision allocates
// only the store keys and what the store itself allocates.
type answer struct {
	plan     descriptor.Plan
	v        engine.Verdict
	code     descriptor.Code
	statuses []descriptor.Status
	fields   []hdr.Field
	buf      []byte
	// compat is the service's Compat when it answers as
	// envoyproxy/ratelimit; metadata its dynamic_metadata.
	compat   *Compat
	metadata *structpb.Struct
}

// inlineStatuses is the number of descriptors a response holds without a
// second allocation (Envoy's route actions rarely produce more); maxHeaders
// the header fields the writer adds to an RLS answer (RateLimit-Policy,
// RateLimit, Retry-After).
const (
	inlineStatuses = 2
	maxHeaders     = 3
)

var answerPool = sync.Pool{New: func() any { return new(answer) }}

// maxPooled bounds the slices an answer keeps in the pool, so that one huge
// request does not pin its memory.
const maxPooled = 256

func (a *answer) release() {
	if cap(a.statuses) > maxPooled || cap(a.plan.Hits) > maxPooled || cap(a.v.Results) > maxPooled || cap(a.buf) > 4<<10 {
		return
	}
	// The plan and the verdict are reset by the next Compile and Decide;
	// what they still hold until then (the last request's keys) is freed
	// with the answer when the pool drops it. Clearing them here as well
	// cost a tenth of BenchmarkEngineDecide.
	a.statuses, a.fields, a.buf = a.statuses[:0], a.fields[:0], a.buf[:0]
	a.compat, a.metadata = nil, nil
	answerPool.Put(a)
}

// writer writes the RateLimit fields of every answer; the RLS has no fixed
// rule set to prepare (overrides come and go), and each limit's own text
// is prepared when it is loaded.
var writer hdr.Writer

// decide is ShouldRateLimit on the compiler's and the engine's types,
// shared by both transports; its errors are gRPC statuses. The caller
// releases the answer.
func (s *Service) decide(ctx context.Context, req *descriptor.Request) (*answer, error) {
	if t := s.opts.Tracer; t != nil {
		var end func()
		ctx, end = t.Start(ctx, req)
		defer end()
	}
	parent := ctx
	// Bound the call by CallTimeout unless the caller's deadline (Envoy
	// always sends one) already comes first: then a second timer would
	// never fire and only cost allocations.
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.opts.CallTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.CallTimeout)
		defer cancel()
	}
	compat := s.opts.Compat
	obs := s.opts.Observer
	if compat != nil && s.compiler.Limits() == nil {
		// The configuration failed at start-up and none has loaded since.
		if obs != nil {
			var p descriptor.Plan
			obs.Observe(req, &p, &engine.Verdict{}, 0, errNoConfig)
		}
		return nil, errNoConfig
	}
	a := answerPool.Get().(*answer)
	now := s.opts.Now()
	if err := s.compiler.Compile(req, now, &a.plan); err != nil {
		if obs != nil {
			obs.Observe(req, &a.plan, &a.v, 0, err)
		}
		a.release()
		if compat != nil {
			return nil, compatRequestError(req, err)
		}
		var re *descriptor.RequestError
		if errors.As(err, &re) && re.Kind == descriptor.NotFound {
			return nil, status.Error(codes.NotFound, re.Msg)
		}
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var start time.Time
	if obs != nil {
		start = time.Now()
	}
	err := s.engine.Decide(ctx, now, a.plan.Hits, &a.v)
	if obs != nil {
		took := time.Since(start)
		oerr := err
		if perr := parent.Err(); perr != nil && (err != nil || a.v.Degraded != nil) {
			oerr = perr
		}
		obs.Observe(req, &a.plan, &a.v, took, oerr)
	}
	if err != nil || a.v.Degraded != nil {
		if perr := parent.Err(); perr != nil {
			// The caller gave up: its answer no longer matters.
			a.release()
			return nil, status.FromContextError(perr).Err()
		}
		cause := a.v.Degraded
		if err != nil {
			cause = err
		}
		s.opts.Logger.Warn("rls: store failed", "domain", req.Domain, "policy", s.engine.OnError().String(), "err", cause)
	}
	if err != nil {
		a.release()
		if errors.Is(err, engine.ErrInvalidHit) {
			return nil, status.Errorf(codes.Internal, "rls: %v", err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, status.Errorf(codes.Unavailable, "store did not answer within %v: %v", s.opts.CallTimeout, err)
		}
		return nil, status.Errorf(codes.Unavailable, "store unavailable: %v", err)
	}
	a.code = a.plan.Code(&a.v)
	whole := compat != nil && !compat.ExactReset // envoyproxy/ratelimit's duration_until_reset
	for i := range a.plan.Descriptors {
		st := a.plan.Status(i, &a.v, now)
		if whole {
			st.ResetAfter = hdr.WholeSeconds(st.ResetAfter)
		}
		a.statuses = append(a.statuses, st)
	}
	if compat != nil {
		s.compatAnswer(a, req, now)
	} else if !s.opts.NoHeaders {
		a.fields, a.buf = writer.Append(a.fields, a.buf, &a.v)
	}
	return a, nil
}

// announced reports whether st's current_limit goes into the response: a
// limit applied and the store, not a failure policy, decided (the
// remaining and reset of a failure policy's decision are no shared count,
// and Envoy would turn them into X-RateLimit headers).
func announced(st *descriptor.Status) bool { return st.Limit != nil && st.Failure == "" }
