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

// SetHeaders writes the rate-limit fields of v on h as the middleware does
// (engine/header), with Cache-Control: no-store on a refusal and, with
// legacy, the X-RateLimit-* fields.
func SetHeaders(h http.Header, v *engine.Verdict, legacy bool) {
	var f httpanswer.Fields
	httpanswer.NewWriter(nil, legacy).Fields(&f, v)
	if !v.Allowed {
		f.Static("Cache-Control", "no-store")
	}
	f.Apply(h)
}

// prepared holds what the middleware prepares once per policy: the answers
// of its verdicts, and the shapes and concurrency queues by rule index.
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

// WriteUnavailable answers 503 temporary-reduced-capacity with Retry-After
// (whole seconds, at least 1): a refusal for the service's own sake.
func WriteUnavailable(w http.ResponseWriter, retryAfter time.Duration, detail string) {
	httpanswer.WriteUnavailable(w, retryAfter, detail)
}

// WriteCostError answers a request whose cost cannot be read: 400 for a
// malformed cost header, 411 when a rule counts body bytes of unknown
// length.
func WriteCostError(w http.ResponseWriter, re *policy.RuleError) {
	httpanswer.Error(w, costStatus(re), re.Error())
}
