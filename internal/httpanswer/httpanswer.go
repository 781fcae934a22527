// Package httpanswer is the HTTP form of an engine verdict, shared by the
// HTTP doors (the middleware and the check API) so that they answer alike:
// header fields set on an http.Header with two allocations at most, and
// the RFC 9457 problem bodies of a refusal.
//
//   - A refusal by the limits is 429 Too Many Requests with a problem of
//     type quota-exceeded naming the violated policies, and Retry-After.
//   - A refusal because the request can never pass (its cost is more than
//     a rule ever admits at once) is 429 of the same type, without
//     Retry-After and without retry-after in the body, whose detail names
//     the rule, the request's cost and the most the rule admits, which the
//     body also carries as cost and max-cost.
//   - A refusal for the service's own sake (the store failed and the
//     failure policy is deny, or shedding) is 503 Service Unavailable of
//     type temporary-reduced-capacity, with Retry-After.
package httpanswer

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
	"github.com/portero-rl/portero/internal/refusal"
)

// Problem types of draft-ietf-httpapi-ratelimit-headers-11 §10 (requested
// IANA registrations).
const (
	ProblemQuotaExceeded            = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// Problem is an RFC 9457 problem details body, with the draft's
// violated-policies member and Portero's extensions.
type Problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// RetryAfter repeats the Retry-After header in seconds, for clients that
	// only read bodies.
	RetryAfter int64 `json:"retry-after,omitempty"`
	// Cost and MaxCost are, for a request that can never pass, its cost
	// and the most its rule admits at once.
	Cost    int64  `json:"cost,omitempty"`
	MaxCost *int64 `json:"max-cost,omitempty"`
}

// Write sends p with Cache-Control: no-store and its own Content-Length.
func Write(w http.ResponseWriter, p Problem) {
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

// WriteUnavailable answers 503 Service Unavailable with a problem body of
// type temporary-reduced-capacity and Retry-After (whole seconds, at least
// 1): the answer when refusing for the service's own sake rather than the
// client's.
func WriteUnavailable(w http.ResponseWriter, retryAfter time.Duration, detail string) {
	secs := max(header.CeilSeconds(retryAfter), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	Write(w, Problem{Type: ProblemTemporaryReducedCapacity, Title: "Service Unavailable",
		Status: http.StatusServiceUnavailable, Detail: detail, RetryAfter: secs})
}

// Fields collects the header fields of one response and sets them on an
// http.Header with two allocations at most, whatever their number: the
// dynamic values live in one buffer that becomes one string, and every
// value's one-element slice is cut from one []string (with its capacity
// capped, so that a later Header.Add copies instead of writing into its
// neighbour). The zero value is ready; Reset keeps the memory.
type Fields struct {
	List []header.Field
	Buf  []byte
}

// Reset empties f for reuse. The old entries are not cleared: they refer
// to header names and to texts prepared with the configuration, not to a
// request, and each is overwritten before it is read again.
func (f *Fields) Reset() {
	f.List, f.Buf = f.List[:0], f.Buf[:0]
}

// Verdict adds the rate-limit fields of v as w writes them.
func (f *Fields) Verdict(w *header.Writer, v *engine.Verdict) {
	f.List, f.Buf = w.Append(f.List, f.Buf, v)
}

// Static adds a field of fixed text under key, a canonical header name.
func (f *Fields) Static(key, val string) {
	f.List = append(f.List, header.Field{Name: key, Key: key, Static: val})
}

// Int adds n in decimal under key; 0–99 take no room in the buffer
// (strconv keeps them as constants).
func (f *Fields) Int(key string, n int64) {
	if n >= 0 && n < 100 {
		f.Static(key, strconv.FormatInt(n, 10))
		return
	}
	start := len(f.Buf)
	f.Buf = strconv.AppendInt(f.Buf, n, 10)
	f.List = append(f.List, header.Field{Name: key, Key: key, Start: start, End: len(f.Buf), Dynamic: true})
}

// Has reports whether a field has the canonical key.
func (f *Fields) Has(key string) bool {
	for _, fd := range f.List {
		if fd.Key == key {
			return true
		}
	}
	return false
}

// Apply sets the collected fields on h, replacing the values they had,
// except RateLimit-Policy and RateLimit, whose values are added after
// those already there: they are lists, and an earlier middleware's (a
// second limiter stacked around this one) must not be lost.
func (f *Fields) Apply(h http.Header) {
	if len(f.List) == 0 {
		return
	}
	var s string
	if len(f.Buf) > 0 {
		s = string(f.Buf)
	}
	vals := make([]string, len(f.List))
	for i, fd := range f.List {
		if fd.Dynamic {
			vals[i] = s[fd.Start:fd.End]
		} else {
			vals[i] = fd.Static
		}
		if fd.Key == canonicalRateLimit || fd.Key == canonicalRateLimitPolicy {
			if old := h[fd.Key]; len(old) > 0 {
				h[fd.Key] = append(old[:len(old):len(old)], vals[i])
				continue
			}
		}
		h[fd.Key] = vals[i : i+1 : i+1]
	}
}

// The canonical keys of the two list fields that Apply adds to.
const (
	canonicalRateLimit       = "Ratelimit"
	canonicalRateLimitPolicy = "Ratelimit-Policy"
)

// Texts holds the fixed parts of the 429 bodies of a rule set, formatted
// once per configuration: per rule, the JSON "detail" up to its seconds and
// the name as a JSON string. It is immutable and safe for concurrent use.
type Texts struct {
	rules  []*engine.Rule // by Index
	detail []string
	name   []string
}

// NewTexts prepares the texts of rules, each at its Index.
func NewTexts(rules []*engine.Rule) *Texts {
	t := &Texts{}
	for _, r := range rules {
		if r.Index < 0 || r.Index > 1<<20 {
			continue
		}
		for len(t.rules) <= r.Index {
			t.rules, t.detail, t.name = append(t.rules, nil), append(t.detail, ""), append(t.name, "")
		}
		t.rules[r.Index], t.detail[r.Index], t.name[r.Index] = r, retryDetail(r), jsonString(r.Name)
	}
	return t
}

func retryDetail(r *engine.Rule) string {
	d := jsonString(refusal.RetryPrefix(r))
	return d[:len(d)-1] // without the closing quote
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (t *Texts) texts(r *engine.Rule) (detail, name string) {
	if t != nil && r.Index >= 0 && r.Index < len(t.rules) && t.rules[r.Index] == r {
		return t.detail[r.Index], t.name[r.Index]
	}
	return retryDetail(r), jsonString(r.Name)
}

// quotaExceededHead is the start of every 429 body, as json.Marshal writes
// a Problem.
const quotaExceededHead = `{"type":"` + ProblemQuotaExceeded + `","title":"Too Many Requests","status":`

// AppendRefusal appends the problem body of refused verdict v to b, the
// Problem that Write would marshal, byte for byte, assembled from the
// parts prepared per rule: type quota-exceeded, the given status (429, or
// a proxy's deny status), the violated policies, and either the detail of
// the first violated rule with retry seconds, or, when the request can
// never pass, the detail of the first rule it can never pass with its cost
// and max-cost and no retry.
func (t *Texts) AppendRefusal(b []byte, status int, v *engine.Verdict, retry int64) []byte {
	b = append(b, quotaExceededHead...)
	b = strconv.AppendInt(b, int64(status), 10)
	never := -1
	for _, i := range v.Violated {
		if v.Results[i].Outcome == engine.CanNeverPass {
			never = i
			break
		}
	}
	if len(v.Violated) > 0 {
		b = append(b, `,"detail":`...)
		if never >= 0 {
			res := &v.Results[never]
			b = append(b, jsonString(refusal.Never(res))...)
		} else {
			d, _ := t.texts(v.Results[v.Violated[0]].Rule)
			b = append(b, d...)
			b = strconv.AppendInt(b, retry, 10)
			b = append(b, ` s"`...)
		}
		b = append(b, `,"violated-policies":[`...)
		for k, i := range v.Violated {
			if k > 0 {
				b = append(b, ',')
			}
			_, n := t.texts(v.Results[i].Rule)
			b = append(b, n...)
		}
		b = append(b, ']')
	}
	if never >= 0 {
		res := &v.Results[never]
		if res.Cost != 0 { // omitempty, as Refusal marshals it
			b = append(b, `,"cost":`...)
			b = strconv.AppendInt(b, res.Cost, 10)
		}
		b = append(b, `,"max-cost":`...)
		b = strconv.AppendInt(b, res.Rule.MaxCost(), 10)
	} else if retry != 0 {
		b = append(b, `,"retry-after":`...)
		b = strconv.AppendInt(b, retry, 10)
	}
	return append(b, "}\n"...)
}

// Refusal returns the Problem of refused verdict v (AppendRefusal writes
// the same bytes): for doors that marshal it themselves, and for tests.
func Refusal(status int, v *engine.Verdict, retry int64) Problem {
	p := Problem{Type: ProblemQuotaExceeded, Title: "Too Many Requests", Status: status}
	never := -1
	for _, i := range v.Violated {
		p.ViolatedPolicies = append(p.ViolatedPolicies, v.Results[i].Rule.Name)
		if never < 0 && v.Results[i].Outcome == engine.CanNeverPass {
			never = i
		}
	}
	switch {
	case never >= 0:
		res := &v.Results[never]
		max := res.Rule.MaxCost()
		p.Detail, p.Cost, p.MaxCost = refusal.Never(res), res.Cost, &max
	case len(v.Violated) > 0:
		p.Detail = refusal.Retry(v.Results[v.Violated[0]].Rule, retry)
		p.RetryAfter = retry
	default:
		p.RetryAfter = retry
	}
	return p
}
