package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/policy"
)

// Problem types of draft-ietf-httpapi-ratelimit-headers-11 §10 (requested
// IANA registrations).
const (
	ProblemQuotaExceeded            = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// Problem is an RFC 9457 problem details body, with the draft's
// violated-policies member.
type Problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// RetryAfter repeats the Retry-After header in seconds, for clients that
	// only read bodies.
	RetryAfter int64 `json:"retry-after,omitempty"`
}

// ceilSeconds rounds d up to whole seconds; negative durations are 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// effectiveWindow is the RateLimit t parameter of a result: for a refused
// rule, the time until the request would be admitted; otherwise the time
// until the key's quota is whole again.
func effectiveWindow(res *policy.Result) int64 {
	if !res.Decision.Allowed {
		return max(ceilSeconds(res.Decision.RetryAfter), 1)
	}
	return ceilSeconds(res.Decision.ResetAfter)
}

// SetHeaders writes RateLimit-Policy and RateLimit for the enforced rules of
// v (shadow rules are not announced), and on a refusal Retry-After and
// Cache-Control: no-store. With legacy it also writes X-RateLimit-Limit,
// -Remaining and -Reset (seconds from now). Policy names are Structured
// Field Strings; RateLimit lists every enforced rule when the request is
// allowed, and only the violated rules, with their own values, when it is
// refused.
func SetHeaders(h http.Header, v *policy.Verdict, legacy bool) {
	var pol, cur []byte
	var pick *policy.Result
	for i := range v.Results {
		res := &v.Results[i]
		if res.Rule.Shadow() {
			continue
		}
		q, w := res.Rule.Quota()
		if len(pol) > 0 {
			pol = append(pol, ", "...)
		}
		pol = strconv.AppendQuote(pol, res.Rule.Name)
		pol = append(pol, ";q="...)
		pol = strconv.AppendInt(pol, q, 10)
		if u := res.Rule.Cost.Unit(); u != "" {
			pol = append(pol, `;qu="`...)
			pol = append(pol, u...)
			pol = append(pol, '"')
		}
		pol = append(pol, ";w="...)
		pol = strconv.AppendInt(pol, max(ceilSeconds(w), 1), 10)
		if !v.Allowed && res.Outcome != policy.Refused {
			continue
		}
		if len(cur) > 0 {
			cur = append(cur, ", "...)
		}
		cur = strconv.AppendQuote(cur, res.Rule.Name)
		cur = append(cur, ";r="...)
		cur = strconv.AppendInt(cur, max(res.Decision.Remaining, 0), 10)
		cur = append(cur, ";t="...)
		cur = strconv.AppendInt(cur, effectiveWindow(res), 10)
		if pick == nil || (v.Allowed && closer(res, pick)) {
			pick = res
		}
	}
	if len(pol) == 0 {
		return
	}
	h.Set("RateLimit-Policy", string(pol))
	h.Set("RateLimit", string(cur))
	if !v.Allowed {
		var retry int64 = 1
		for _, i := range v.Violated {
			retry = max(retry, effectiveWindow(&v.Results[i]))
		}
		h.Set("Retry-After", strconv.FormatInt(retry, 10))
		h.Set("Cache-Control", "no-store")
	}
	if legacy && pick != nil {
		q, _ := pick.Rule.Quota()
		h.Set("X-RateLimit-Limit", strconv.FormatInt(q, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(max(pick.Decision.Remaining, 0), 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(effectiveWindow(pick), 10))
	}
}

// closer reports whether a is closer to exhaustion than b.
func closer(a, b *policy.Result) bool {
	// a.Remaining/a.Limit < b.Remaining/b.Limit, without division.
	return a.Decision.Remaining*b.Decision.Limit < b.Decision.Remaining*a.Decision.Limit
}

func writeProblem(w http.ResponseWriter, p Problem) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	body, _ := json.Marshal(p)
	body = append(body, '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// writeRefusal answers a request refused by the policy; the headers are
// already set.
func writeRefusal(w http.ResponseWriter, v *policy.Verdict) {
	p := Problem{Type: ProblemQuotaExceeded, Title: "Too Many Requests", Status: http.StatusTooManyRequests}
	for _, i := range v.Violated {
		p.ViolatedPolicies = append(p.ViolatedPolicies, v.Results[i].Rule.Name)
	}
	p.RetryAfter, _ = strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
	if len(v.Violated) > 0 {
		res := &v.Results[v.Violated[0]]
		q, win := res.Rule.Quota()
		p.Detail = fmt.Sprintf("rule %q allows %d per %s for this client; retry in %d s", res.Rule.Name, q, win, p.RetryAfter)
	}
	writeProblem(w, p)
}

// WriteUnavailable answers 503 Service Unavailable with a problem body of
// type temporary-reduced-capacity and Retry-After (whole seconds, at least
// 1): the answer when refusing for the service's own sake rather than the
// client's.
func WriteUnavailable(w http.ResponseWriter, retryAfter time.Duration, detail string) {
	secs := max(ceilSeconds(retryAfter), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	writeProblem(w, Problem{Type: ProblemTemporaryReducedCapacity, Title: "Service Unavailable",
		Status: http.StatusServiceUnavailable, Detail: detail, RetryAfter: secs})
}

func writeCostError(w http.ResponseWriter, re *policy.RuleError) {
	status, title := http.StatusBadRequest, "Bad Request"
	switch {
	case errors.Is(re, policy.ErrLengthRequired):
		status, title = http.StatusLengthRequired, "Length Required"
	case errors.Is(re, portero.ErrCostExceedsLimit):
		status, title = http.StatusRequestEntityTooLarge, "Content Too Large"
	}
	writeProblem(w, Problem{Type: "about:blank", Title: title, Status: status, Detail: re.Error()})
}
