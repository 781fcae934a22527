package httplimit

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/sfv"
	"github.com/portero-rl/portero/overload"
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
// refused, leaving out the rules a store's failure policy decided
// (portero.Decision.Degraded), whose values would be made up.
func SetHeaders(h http.Header, v *policy.Verdict, legacy bool) {
	var hs headerSet
	hs.verdict(v, legacy, nil)
	hs.apply(h)
}

// Canonical header names, assigned directly to the header map: Header.Set
// would canonicalize them again on every response.
const (
	hRateLimitPolicy    = "Ratelimit-Policy"
	hRateLimit          = "Ratelimit"
	hRetryAfter         = "Retry-After"
	hCacheControl       = "Cache-Control"
	hContentType        = "Content-Type"
	hContentLength      = "Content-Length"
	hContentTypeOptions = "X-Content-Type-Options"
	hLegacyLimit        = "X-Ratelimit-Limit"
	hLegacyRemaining    = "X-Ratelimit-Remaining"
	hLegacyReset        = "X-Ratelimit-Reset"
)

// headerSet collects the headers of one response and sets them with two
// allocations at most, whatever their number: the dynamic values are
// formatted into one buffer that becomes one string, and every value's
// one-element slice is cut from one []string (with its capacity capped, so
// that a later Header.Add copies instead of writing into its neighbour).
// The zero value is ready; reset keeps the memory for the next response.
type headerSet struct {
	buf  []byte
	list []pendingHeader
}

type pendingHeader struct {
	key        string
	val        string // the value when !dyn
	start, end int    // the value is buf[start:end] when dyn
	dyn        bool
}

func (hs *headerSet) reset() {
	hs.buf = hs.buf[:0]
	clear(hs.list)
	hs.list = hs.list[:0]
}

func (hs *headerSet) static(key, val string) {
	hs.list = append(hs.list, pendingHeader{key: key, val: val})
}

// since records buf[start:] as the value of key.
func (hs *headerSet) since(key string, start int) {
	hs.list = append(hs.list, pendingHeader{key: key, start: start, end: len(hs.buf), dyn: true})
}

// int sets key to n in decimal; strconv keeps 0–99 as constants, so those
// take no room in the buffer.
func (hs *headerSet) int(key string, n int64) {
	if n >= 0 && n < 100 {
		hs.static(key, strconv.FormatInt(n, 10))
		return
	}
	start := len(hs.buf)
	hs.buf = strconv.AppendInt(hs.buf, n, 10)
	hs.since(key, start)
}

// apply sets the collected headers on h, replacing any values they had.
func (hs *headerSet) apply(h http.Header) {
	if len(hs.list) == 0 {
		return
	}
	var s string
	if len(hs.buf) > 0 {
		s = string(hs.buf)
	}
	vals := make([]string, len(hs.list))
	for i, p := range hs.list {
		if p.dyn {
			vals[i] = s[p.start:p.end]
		} else {
			vals[i] = p.val
		}
		h[p.key] = vals[i : i+1 : i+1]
	}
}

// verdict collects the rate-limit headers of v (see SetHeaders) and
// returns the Retry-After it set, 0 when allowed. pre, when not nil, holds
// the preformatted RateLimit-Policy members of v's policy.
func (hs *headerSet) verdict(v *policy.Verdict, legacy bool, pre *prepared) (retry int64) {
	// RateLimit-Policy: usually every enforced rule of the policy applies,
	// and its value was formatted once at configuration time.
	polStart, n, all := len(hs.buf), 0, pre != nil
	var pick *policy.Result
	for i := range v.Results {
		res := &v.Results[i]
		if res.Rule.Shadow() {
			continue
		}
		if pre != nil && (n >= len(pre.enforced) || pre.enforced[n] != res.Rule.Index()) {
			all = false
		}
		n++
		if (!v.Allowed && res.Outcome != policy.Refused) || res.Decision.Degraded {
			continue
		}
		if pick == nil || (v.Allowed && closer(res, pick)) {
			pick = res
		}
	}
	if n == 0 {
		return 0
	}
	if all && n == len(pre.enforced) {
		hs.static(hRateLimitPolicy, pre.allPolicy)
	} else {
		first := true
		for i := range v.Results {
			res := &v.Results[i]
			if res.Rule.Shadow() {
				continue
			}
			if !first {
				hs.buf = append(hs.buf, ", "...)
			}
			first = false
			if pre != nil {
				hs.buf = append(hs.buf, pre.member[res.Rule.Index()]...)
			} else {
				hs.buf = appendPolicyMember(hs.buf, res.Rule)
			}
		}
		hs.since(hRateLimitPolicy, polStart)
	}

	// RateLimit: every enforced rule when allowed, the violated ones when
	// refused, each with its own values. A rule the store's failure policy
	// decided (Decision.Degraded) has no values to tell: it stays in
	// RateLimit-Policy and gets no RateLimit item.
	start, first := len(hs.buf), true
	for i := range v.Results {
		res := &v.Results[i]
		if res.Rule.Shadow() || (!v.Allowed && res.Outcome != policy.Refused) || res.Decision.Degraded {
			continue
		}
		if !first {
			hs.buf = append(hs.buf, ", "...)
		}
		first = false
		hs.buf = sfv.AppendString(hs.buf, res.Rule.Name)
		hs.buf = append(hs.buf, ";r="...)
		hs.buf = strconv.AppendInt(hs.buf, max(res.Decision.Remaining, 0), 10)
		hs.buf = append(hs.buf, ";t="...)
		hs.buf = strconv.AppendInt(hs.buf, effectiveWindow(res), 10)
	}
	if !first {
		hs.since(hRateLimit, start)
	}

	if !v.Allowed {
		retry = 1
		for _, i := range v.Violated {
			retry = max(retry, effectiveWindow(&v.Results[i]))
		}
		hs.int(hRetryAfter, retry)
		hs.static(hCacheControl, "no-store")
	}
	if legacy && pick != nil {
		q, _ := pick.Rule.Quota()
		hs.int(hLegacyLimit, q)
		hs.int(hLegacyRemaining, max(pick.Decision.Remaining, 0))
		hs.int(hLegacyReset, effectiveWindow(pick))
	}
	return retry
}

// appendPolicyMember appends the RateLimit-Policy member of rule r, such as
// "per-ip";q=100;w=60.
func appendPolicyMember(b []byte, r *policy.Rule) []byte {
	q, w := r.Quota()
	b = sfv.AppendString(b, r.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, q, 10)
	if u := r.Cost.Unit(); u != "" {
		b = append(b, `;qu="`...)
		b = append(b, u...)
		b = append(b, '"')
	}
	b = append(b, ";w="...)
	return strconv.AppendInt(b, max(ceilSeconds(w), 1), 10)
}

// prepared holds what the middleware formats once per policy rather than
// once per request: the RateLimit-Policy members and the fixed parts of the
// 429 body of every rule.
type prepared struct {
	member    []string         // by rule index: the RateLimit-Policy member
	enforced  []int            // indexes of the enforced rules, in order
	allPolicy string           // RateLimit-Policy when every enforced rule applies
	detail    []string         // by rule index: the JSON "detail" string up to the seconds, without its closing quote
	nameJSON  []string         // by rule index: the rule name as a JSON string
	shape     []overload.Shape // by rule index, when Config.Shapes names any (setShapes)
}

func prepare(p *policy.Policy) *prepared {
	rules := p.Rules()
	pre := &prepared{member: make([]string, len(rules)), detail: make([]string, len(rules)), nameJSON: make([]string, len(rules))}
	var all []byte
	for i, r := range rules {
		pre.member[i] = string(appendPolicyMember(nil, r))
		if !r.Shadow() {
			if len(pre.enforced) > 0 {
				all = append(all, ", "...)
			}
			all = append(all, pre.member[i]...)
			pre.enforced = append(pre.enforced, i)
		}
		q, win := r.Quota()
		msg := fmt.Sprintf("rule %q allows %d per %s for this client; retry in ", r.Name, q, win)
		if l := r.Limit; l.IsCalendar() {
			// A spent quota says so: going slower does not help, the
			// next period does.
			msg = fmt.Sprintf("rule %q is a quota of %d per calendar %s (%s) for this client, spent for this %s; retry in ", r.Name, q, l.Period, cmp.Or(l.Zone, "UTC"), l.Period)
		}
		d, _ := json.Marshal(msg)
		pre.detail[i] = string(d[:len(d)-1])
		nj, _ := json.Marshal(r.Name)
		pre.nameJSON[i] = string(nj)
	}
	pre.allPolicy = string(all)
	return pre
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

// quotaExceededHead is the start of every 429 body, as json.Marshal writes
// a Problem.
const quotaExceededHead = `{"type":"` + ProblemQuotaExceeded + `","title":"Too Many Requests","status":429`

// appendRefusal appends the 429 problem body of v to b: the Problem
// writeProblem would marshal (type quota-exceeded, the violated policies,
// the detail of the first), byte for byte, but assembled from the parts
// prepared per rule.
func appendRefusal(b []byte, v *policy.Verdict, retry int64, pre *prepared) []byte {
	b = append(b, quotaExceededHead...)
	if len(v.Violated) > 0 {
		b = append(b, `,"detail":`...)
		b = append(b, pre.detail[v.Results[v.Violated[0]].Rule.Index()]...)
		b = strconv.AppendInt(b, retry, 10)
		b = append(b, ` s"`...)
		b = append(b, `,"violated-policies":[`...)
		for k, i := range v.Violated {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, pre.nameJSON[v.Results[i].Rule.Index()]...)
		}
		b = append(b, ']')
	}
	if retry != 0 {
		b = append(b, `,"retry-after":`...)
		b = strconv.AppendInt(b, retry, 10)
	}
	return append(b, "}\n"...)
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
