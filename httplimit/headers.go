package httplimit

import (
	"net/http"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/httpanswer"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// Problem types of draft-ietf-httpapi-ratelimit-headers-11 §10 (requested
// IANA registrations).
const (
	ProblemQuotaExceeded            = httpanswer.ProblemQuotaExceeded
	ProblemTemporaryReducedCapacity = httpanswer.ProblemTemporaryReducedCapacity
)

// Problem is an RFC 9457 problem details body, with the draft's
// violated-policies member; for a request that can never pass, its cost
// and the max-cost of the rule.
type Problem = httpanswer.Problem

// SetHeaders writes the rate-limit fields of v on h, as the middleware
// does (package engine/header): RateLimit-Policy for the enforced rules
// that applied, RateLimit with their state (only the violated rules of a
// refusal, none for a rule the failure policy decided), Retry-After on a
// refusal that a retry can cure, Cache-Control: no-store on a refusal,
// and with legacy the X-RateLimit-* fields of the deciding rule.
func SetHeaders(h http.Header, v *engine.Verdict, legacy bool) {
	var f httpanswer.Fields
	httpanswer.NewWriter(nil, legacy).Fields(&f, v)
	if !v.Allowed {
		f.Static("Cache-Control", "no-store")
	}
	f.Apply(h)
}

// prepared holds what the middleware formats once per policy rather than
// once per request: the answers of its verdicts (the joined
// RateLimit-Policy, the fixed parts of the problem bodies), the queue
// shapes and the concurrency queues, by rule index.
type prepared struct {
	answer *httpanswer.Writer
	shape  []overload.Shape // by rule index; nil when no rule is shaped
	queue  []overload.Queue // by rule index; nil when no rule queues (Size 0: none)
	queues bool             // some rule is a leaky queue
}

func prepare(p *policy.Policy, legacy bool) *prepared {
	rules := make([]*engine.Rule, 0, len(p.Rules()))
	queues := false
	for _, r := range p.Rules() {
		rules = append(rules, r.Engine())
		queues = queues || r.StoreRule().Algorithm == portero.LeakyQueue
	}
	return &prepared{answer: httpanswer.NewWriter(rules, legacy), queues: queues}
}

// WriteUnavailable answers 503 Service Unavailable with a problem body of
// type temporary-reduced-capacity and Retry-After (whole seconds, at least
// 1): the answer when refusing for the service's own sake rather than the
// client's.
func WriteUnavailable(w http.ResponseWriter, retryAfter time.Duration, detail string) {
	httpanswer.WriteUnavailable(w, retryAfter, detail)
}

// WriteCostError answers a request whose cost cannot be read (the
// middleware's answer, and the gateway's GET /v1/limits's): 400 for a
// malformed cost header, 411 when a rule counts body bytes and the length
// is unknown. (A cost above what a rule can ever admit is no error: the
// engine refuses it with a 429 that says it can never pass.)
func WriteCostError(w http.ResponseWriter, re *policy.RuleError) {
	httpanswer.Error(w, costStatus(re), re.Error())
}
