// Package httpanswer is the one way an HTTP door answers: a verdict's
// header fields (set with two allocations at most) and, for a refusal, its
// status and RFC 9457 problem body, written by Writer.Refuse for the
// middleware, the gateway, /v1/check and /v1/auth alike.
//
//   - Refused by the limits: 429 Too Many Requests, a problem of type
//     quota-exceeded naming the violated policies, and Retry-After.
//   - Refused because the request can never pass (its cost is more than a
//     rule ever admits at once): 429 of the same type, without Retry-After
//     and without retry-after in the body; its detail names the rule, the
//     cost and the most the rule admits, which the body carries as cost
//     and max-cost.
//   - Refused for the service's own sake (engine.Verdict.Unavailable: the
//     store failed under deny, or a service-wide concurrency limit is
//     full): 503 Service Unavailable of type temporary-reduced-capacity,
//     with Retry-After.
//
// A door may answer a refusal with a status of its own (/v1/auth's deny
// status for nginx and Traefik); the body is the same.
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

// Write sends p with its status, Cache-Control: no-store, nosniff and its
// own Content-Length.
func Write(w http.ResponseWriter, p Problem) {
	body, _ := json.Marshal(p)
	writeBody(w, p.Status, append(body, '\n'))
}

// Error sends a problem of type about:blank: status, its text as the
// title, and detail.
func Error(w http.ResponseWriter, status int, detail string) {
	Write(w, Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// WriteUnavailable answers 503 Service Unavailable with a problem body of
// type temporary-reduced-capacity and Retry-After (whole seconds, at least
// 1): the answer when refusing for the service's own sake without a
// verdict (shedding, a wait that ended, a store error reported to the
// caller).
func WriteUnavailable(w http.ResponseWriter, retryAfter time.Duration, detail string) {
	secs := max(header.CeilSeconds(retryAfter), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	Write(w, Problem{Type: ProblemTemporaryReducedCapacity, Title: "Service Unavailable",
		Status: http.StatusServiceUnavailable, Detail: detail, RetryAfter: secs})
}

// Status is what an HTTP door answers verdict v: 0 when it is allowed (the
// request passes), 503 when it is refused for the service's own sake
// (engine.Verdict.Unavailable), 429 otherwise.
func Status(v *engine.Verdict) int {
	switch {
	case v.Allowed:
		return 0
	case v.Unavailable():
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}

// Writer writes the answers of verdicts over one rule set: their header
// fields (engine/header) and the fixed parts of their problem bodies,
// formatted once per configuration. It is immutable and safe for
// concurrent use; a nil *Writer formats everything per request.
type Writer struct {
	header *header.Writer
	texts  texts
}

// NewWriter prepares the answers of verdicts over rules (a configuration's
// rules, each at its Index); legacy adds the X-RateLimit-* fields.
func NewWriter(rules []*engine.Rule, legacy bool) *Writer {
	return &Writer{header: header.NewWriter(rules, legacy), texts: newTexts(rules)}
}

var zeroWriter = &Writer{header: &header.Writer{}}

// Fields adds the rate-limit fields of v to f.
func (w *Writer) Fields(f *Fields, v *engine.Verdict) {
	if w == nil {
		w = zeroWriter
	}
	f.List, f.Buf = w.header.Append(f.List, f.Buf, v)
}

// Refuse writes the answer of refused verdict v: status (0 for Status(v)),
// the rate-limit fields, Cache-Control: no-store and the problem body, in
// one batch with the fields f already holds (a door's own). body is memory
// for the body, returned for reuse.
func (w *Writer) Refuse(rw http.ResponseWriter, f *Fields, body []byte, v *engine.Verdict, status int) []byte {
	if status == 0 {
		status = Status(v)
	}
	w.Fields(f, v)
	body = w.AppendRefusal(body[:0], status, v, header.RetryAfterSeconds(v))
	f.Static("Content-Type", "application/problem+json")
	f.Static("Cache-Control", "no-store")
	f.Static("X-Content-Type-Options", "nosniff")
	f.Int("Content-Length", int64(len(body)))
	f.Apply(rw.Header())
	rw.WriteHeader(status)
	_, _ = rw.Write(body)
	return body
}

// Fields collects the header fields of one response and sets them on an
// http.Header with two allocations, whatever their number: one string for
// the dynamic values, one []string cut into capped one-element slices. The
// zero value is ready; Reset keeps the memory.
type Fields struct {
	List []header.Field
	Buf  []byte
}

// Reset empties f for reuse (its entries refer to no request).
func (f *Fields) Reset() {
	f.List, f.Buf = f.List[:0], f.Buf[:0]
}

// Static adds a field of fixed text under key, a canonical header name.
func (f *Fields) Static(key, val string) {
	f.List = append(f.List, header.Field{Name: key, Key: key, Static: val})
}

// Int adds n in decimal under key.
func (f *Fields) Int(key string, n int64) {
	f.List, f.Buf = header.AppendInt(f.List, f.Buf, key, key, n)
}

// Apply sets the fields on h, replacing their values, except the RateLimit
// lists, which are added to (a second limiter stacked around this one).
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
		if fd.Name == header.RateLimit || fd.Name == header.RateLimitPolicy {
			if old := h[fd.Key]; len(old) > 0 {
				h[fd.Key] = append(old[:len(old):len(old)], vals[i])
				continue
			}
		}
		h[fd.Key] = vals[i : i+1 : i+1]
	}
}

// texts are the fixed parts of the problem bodies of a rule set, per rule
// by Index: the JSON "detail" up to its seconds, and the name as a JSON
// string.
type texts struct {
	rules  []*engine.Rule
	detail []string
	name   []string
}

func newTexts(rules []*engine.Rule) texts {
	var t texts
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

func (w *Writer) text(r *engine.Rule) (detail, name string) {
	if w != nil {
		if t := &w.texts; r.Index >= 0 && r.Index < len(t.rules) && t.rules[r.Index] == r {
			return t.detail[r.Index], t.name[r.Index]
		}
	}
	return retryDetail(r), jsonString(r.Name)
}

// The starts of the two refusals' bodies, as json.Marshal writes a Problem.
const (
	quotaExceededHead = `{"type":"` + ProblemQuotaExceeded + `","title":"Too Many Requests","status":`
	unavailableHead   = `{"type":"` + ProblemTemporaryReducedCapacity + `","title":"Service Unavailable","status":`
)

// storeFailed is the detail of a refusal by the failure policy.
const storeFailed = "the rate limiter cannot reach its store"

// AppendRefusal appends the problem body of refused verdict v to b, the
// Problem that Refusal returns as json.Marshal writes it, byte for byte,
// from the parts prepared per rule: of type temporary-reduced-capacity
// when v is refused for the service's sake, quota-exceeded otherwise; the
// given status; and, after the detail, the violated policies (none when
// the failure policy refused it), then the cost and max-cost of a request
// that can never pass, or the retry seconds.
func (w *Writer) AppendRefusal(b []byte, status int, v *engine.Verdict, retry int64) []byte {
	head := quotaExceededHead
	if v.Unavailable() {
		head = unavailableHead
	}
	b = append(b, head...)
	b = strconv.AppendInt(b, int64(status), 10)
	never := neverIndex(v)
	switch {
	case v.Unavailable() && v.StoreFailed():
		b = append(b, `,"detail":"`+storeFailed+`"`...)
	case len(v.Violated) > 0:
		b = append(b, `,"detail":`...)
		if never >= 0 {
			b = append(b, jsonString(refusal.Never(&v.Results[never]))...)
		} else {
			d, _ := w.text(v.Results[v.Violated[0]].Rule)
			b = append(b, d...)
			b = strconv.AppendInt(b, retry, 10)
			b = append(b, ` s"`...)
		}
		b = append(b, `,"violated-policies":[`...)
		for k, i := range v.Violated {
			if k > 0 {
				b = append(b, ',')
			}
			_, n := w.text(v.Results[i].Rule)
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

// neverIndex is the index in v.Results of the first violated hit that can
// never pass, or -1.
func neverIndex(v *engine.Verdict) int {
	for _, i := range v.Violated {
		if v.Results[i].Outcome == engine.CanNeverPass {
			return i
		}
	}
	return -1
}

// Refusal returns the Problem of refused verdict v, whose bytes
// AppendRefusal writes: for a door that marshals it itself, and for tests.
func Refusal(status int, v *engine.Verdict, retry int64) Problem {
	p := Problem{Type: ProblemQuotaExceeded, Title: "Too Many Requests", Status: status, RetryAfter: retry}
	if v.Unavailable() {
		p.Type, p.Title = ProblemTemporaryReducedCapacity, "Service Unavailable"
	}
	never := neverIndex(v)
	if v.Unavailable() && v.StoreFailed() {
		p.Detail = storeFailed
		return p
	}
	for _, i := range v.Violated {
		p.ViolatedPolicies = append(p.ViolatedPolicies, v.Results[i].Rule.Name)
	}
	switch {
	case never >= 0:
		res := &v.Results[never]
		max := res.Rule.MaxCost()
		p.Detail, p.Cost, p.MaxCost, p.RetryAfter = refusal.Never(res), res.Cost, &max, 0
	case len(v.Violated) > 0:
		p.Detail = refusal.Retry(v.Results[v.Violated[0]].Rule, retry)
	}
	return p
}
