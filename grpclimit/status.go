package grpclimit

import (
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
	"github.com/portero-rl/portero/internal/refusal"
)

// PushbackKey is the trailer through which a server tells a gRPC client's
// retry policy how long to wait, in milliseconds (gRPC's retry design, A6);
// a negative value asks it not to retry at all.
const PushbackKey = "grpc-retry-pushback-ms"

// RetryDelay is how long a refused verdict asks the client to wait: the
// longest wait of the hits that refused it, rounded up to the millisecond
// (the pushback's unit), at least 1 ms; 0 when v is allowed or can never
// pass. The HTTP doors round the same wait up to whole seconds for
// Retry-After.
func RetryDelay(v *engine.Verdict) time.Duration {
	if v.Allowed || v.NeverPasses() {
		return 0
	}
	var d time.Duration
	for _, i := range v.Violated {
		d = max(d, v.Results[i].Decision.RetryAfter)
	}
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return max(d, time.Millisecond)
}

// pushback is the grpc-retry-pushback-ms value of a refusal: its delay in
// milliseconds, or -1 (do not retry) for one that can never pass.
func pushback(v *engine.Verdict) string {
	if v.NeverPasses() {
		return "-1"
	}
	return strconv.FormatInt(RetryDelay(v).Milliseconds(), 10)
}

// Refusal returns the status of refused verdict v, as the interceptors
// answer it: codes.Unavailable with RetryInfo when v is refused for the
// service's sake (engine.Verdict.Unavailable), otherwise
// codes.ResourceExhausted with a QuotaFailure naming each rule that refused
// (Subject and QuotaId its name, QuotaValue its q, Description the words
// of the HTTP doors' problem detail) and, unless it can never pass,
// RetryInfo. The message is the description of the first rule that
// refused.
func Refusal(v *engine.Verdict) *status.Status {
	secs := header.RetryAfterSeconds(v)
	code := codes.ResourceExhausted
	if v.Unavailable() {
		code = codes.Unavailable
	}
	var qf errdetails.QuotaFailure
	msg := "the rate limiter cannot reach its store"
	for k, i := range v.Violated {
		res := &v.Results[i]
		if res.Failure != "" && res.Outcome != engine.CanNeverPass {
			continue // the failure policy refused: no rule to name
		}
		desc := refusal.Retry(res.Rule, secs)
		if res.Outcome == engine.CanNeverPass {
			desc = refusal.Never(res)
		}
		q, _ := res.Rule.Quota()
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{Subject: res.Rule.Name, QuotaId: res.Rule.Name, QuotaValue: q, Description: desc})
		if k == 0 || len(qf.Violations) == 1 {
			msg = desc
		}
	}
	st := status.New(code, msg)
	var details []protoadapt.MessageV1
	if d := RetryDelay(v); d > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	}
	if len(qf.Violations) > 0 {
		details = append(details, &qf)
	}
	if len(details) == 0 {
		return st
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		return st // a well-formed message always marshals
	}
	return withDetails
}

// unavailable is the status of a refusal for the service's sake that the
// engine did not decide (shedding): codes.Unavailable with RetryInfo.
func unavailable(retry time.Duration, msg string) *status.Status {
	st := status.New(codes.Unavailable, msg)
	if withDetails, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(max(retry, time.Millisecond))}); err == nil {
		return withDetails
	}
	return st
}

// HTTPStatus is the HTTP status google.rpc.Code documents for a gRPC code:
// what a rule's Responses (count only 401 and 403, or 5xx) means for a gRPC
// call.
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return 200
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return 400
	case codes.DeadlineExceeded:
		return 504
	case codes.NotFound:
		return 404
	case codes.AlreadyExists, codes.Aborted:
		return 409
	case codes.PermissionDenied:
		return 403
	case codes.Unauthenticated:
		return 401
	case codes.ResourceExhausted:
		return 429
	case codes.Unimplemented:
		return 501
	case codes.Unavailable:
		return 503
	}
	return 500 // Unknown, Internal, DataLoss
}
