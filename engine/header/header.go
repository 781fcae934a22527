// Package header is the one writer of Portero's rate-limit header fields,
// for every door (an http.Header, the RLS's response_headers_to_add, gRPC
// metadata): RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11), Retry-After (RFC 9110), and
// the legacy X-RateLimit-Limit, -Remaining and -Reset.
//
// RateLimit-Policy lists the enforced rules that applied, once each, as
// "name";q=Q;w=W (engine.Rule.Quota: for the windows q = L and w = W; for
// the buckets, GCRA and the queue q = B and w = B/r; a concurrency limit
// ;qu="concurrent-requests" and no w), with ;qu="content-bytes" for a cost
// in bytes. RateLimit is "name";r=R;t=T for every enforced rule of an
// allowed request or a look (engine.Verdict.Look), for the refusing rules
// of a refusal: r what is left, t the seconds until the same request could
// pass for a refusing rule, else until the quota is whole (a concurrency
// limit has no t); a rule the failure policy decided has no item.
// Retry-After (whole seconds rounded up, at least 1) comes with every
// refusal that a retry can cure. The legacy fields describe the rule that
// decided (engine.Verdict.Decider).
//
// A rule's name and policy member are quoted once, when its configuration
// loads (Announce, with github.com/dunglas/httpsfv), so that a name that is
// not a Structured Field String is a configuration error; per request the
// writer only appends integers to that text.
package header

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/portero-rl/portero/engine"
)

// The field names, and their canonical forms (http.Header's keys).
const (
	RateLimitPolicy = "RateLimit-Policy"
	RateLimit       = "RateLimit"
	RetryAfter      = "Retry-After"
	LegacyLimit     = "X-RateLimit-Limit"
	LegacyRemaining = "X-RateLimit-Remaining"
	LegacyReset     = "X-RateLimit-Reset"

	canonicalRateLimitPolicy = "Ratelimit-Policy"
	canonicalRateLimit       = "Ratelimit"
	canonicalRetryAfter      = "Retry-After"
	canonicalLegacyLimit     = "X-Ratelimit-Limit"
	canonicalLegacyRemaining = "X-Ratelimit-Remaining"
	canonicalLegacyReset     = "X-Ratelimit-Reset"
)

// Announce returns r's name as a Structured Field String and its
// RateLimit-Policy member, or why they cannot be written (a name or unit
// that is not printable ASCII, a q over 15 digits). Compilers call it once
// per rule and keep it in r.Announce.
func Announce(r *engine.Rule) (engine.Announcement, error) {
	name, err := httpsfv.Marshal(httpsfv.NewItem(r.Name))
	if err != nil {
		return engine.Announcement{}, fmt.Errorf("name %q cannot appear in a RateLimit header (printable ASCII only): %w", r.Name, err)
	}
	q, w := r.Quota()
	item := httpsfv.NewItem(r.Name)
	item.Params.Add("q", q)
	if unit := r.Unit; unit != "" || r.IsConcurrency() {
		if unit == "" {
			unit = engine.ConcurrencyUnit // before NewRule sets it
		}
		item.Params.Add("qu", unit)
	}
	if w > 0 {
		item.Params.Add("w", max(CeilSeconds(w), 1))
	}
	pol, err := httpsfv.Marshal(item)
	if err != nil {
		return engine.Announcement{}, fmt.Errorf("rule %q: RateLimit-Policy q=%d qu=%q w=%v: %w", r.Name, q, r.Unit, w, err)
	}
	return engine.Announcement{Name: name, Policy: pol}, nil
}

// Field is one header field of a verdict: Name, Key (canonical), and a
// value that is Static text or, when Dynamic, buf[Start:End] of the buffer
// Writer.Append returned.
type Field struct {
	Name, Key  string
	Static     string
	Start, End int
	Dynamic    bool
}

// Bytes returns f's value when dynamic, a slice of buf; nil for a static
// value (use Static).
func (f Field) Bytes(buf []byte) []byte {
	if !f.Dynamic {
		return nil
	}
	return buf[f.Start:f.End:f.End]
}

// Value returns f's value as a string (allocating for a dynamic one).
func (f Field) Value(buf []byte) string {
	if !f.Dynamic {
		return f.Static
	}
	return string(buf[f.Start:f.End])
}

// Writer writes the fields of verdicts; the zero value is ready, NewWriter
// prepares a rule set's. It is immutable and safe for concurrent use.
type Writer struct {
	// Legacy adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset.
	Legacy bool

	enforced []*engine.Rule // the set's enforced rules, in order
	all      string         // their RateLimit-Policy, joined
}

// NewWriter returns a writer for verdicts over rules (a configuration's,
// announced), whose RateLimit-Policy for all its enforced rules is joined
// here once.
func NewWriter(rules []*engine.Rule, legacy bool) *Writer {
	w := &Writer{Legacy: legacy}
	var all []byte
	for _, r := range rules {
		if r.Shadow || r.Announce.Policy == "" {
			continue
		}
		if len(w.enforced) > 0 {
			all = append(all, ", "...)
		}
		all = append(all, r.Announce.Policy...)
		w.enforced = append(w.enforced, r)
	}
	w.all = string(all)
	return w
}

// entry is one announced rule and the result that describes it.
type entry struct {
	rule *engine.Rule
	res  *engine.Result
	ann  engine.Announcement
}

// maxEntries rules are announced without allocating.
const maxEntries = 8

// Append appends the fields of v to fields, the values that change per
// request formatted into buf, and returns both; reused, they allocate
// nothing. A rule not announced is formatted here, or left out.
func (w *Writer) Append(fields []Field, buf []byte, v *engine.Verdict) ([]Field, []byte) {
	var eb [maxEntries]entry
	ents := eb[:0]
	for i := range v.Results {
		res := &v.Results[i]
		r := res.Rule
		if r.Shadow {
			continue
		}
		dup := false
		for k := range ents {
			if e := &ents[k]; e.rule == r || e.ann.Name == r.Announce.Name && r.Announce.Name != "" {
				dup = true
				if describesBetter(res, e.res) {
					e.res = res
				}
				break
			}
		}
		if dup {
			continue
		}
		ann := r.Announce
		if ann.Policy == "" {
			var err error
			if ann, err = Announce(r); err != nil {
				continue
			}
		}
		ents = append(ents, entry{rule: r, res: res, ann: ann})
	}
	if len(ents) == 0 {
		if retry := RetryAfterSeconds(v); retry > 0 {
			fields, buf = AppendInt(fields, buf, RetryAfter, canonicalRetryAfter, retry)
		}
		return fields, buf
	}

	// RateLimit-Policy: static when it is one rule or the whole set.
	pol := Field{Name: RateLimitPolicy, Key: canonicalRateLimitPolicy}
	switch {
	case len(ents) == 1:
		pol.Static = ents[0].ann.Policy
	case w.isAll(ents):
		pol.Static = w.all
	default:
		start := len(buf)
		for k, e := range ents {
			if k > 0 {
				buf = append(buf, ", "...)
			}
			buf = append(buf, e.ann.Policy...)
		}
		pol.Start, pol.End, pol.Dynamic = start, len(buf), true
	}
	fields = append(fields, pol)

	// RateLimit: the rules that refused, or all when allowed; none that the
	// failure policy decided.
	start := len(buf)
	for _, e := range ents {
		if e.res.Failure != "" || !v.Allowed && !v.Look && !violated(e.res) {
			continue
		}
		if len(buf) > start {
			buf = append(buf, ", "...)
		}
		buf = append(buf, e.ann.Name...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, max(e.res.Decision.Remaining, 0), 10)
		if !e.rule.IsConcurrency() {
			buf = append(buf, ";t="...)
			buf = strconv.AppendInt(buf, effectiveWindow(e.res), 10)
		}
	}
	if len(buf) > start {
		fields = append(fields, Field{Name: RateLimit, Key: canonicalRateLimit, Start: start, End: len(buf), Dynamic: true})
	}

	if retry := RetryAfterSeconds(v); retry > 0 {
		fields, buf = AppendInt(fields, buf, RetryAfter, canonicalRetryAfter, retry)
	}

	if w.Legacy {
		if i := v.Decider(); i >= 0 && v.Results[i].Failure == "" {
			res := &v.Results[i]
			q, _ := res.Rule.Quota()
			fields, buf = AppendInt(fields, buf, LegacyLimit, canonicalLegacyLimit, q)
			fields, buf = AppendInt(fields, buf, LegacyRemaining, canonicalLegacyRemaining, max(res.Decision.Remaining, 0))
			fields, buf = AppendInt(fields, buf, LegacyReset, canonicalLegacyReset, effectiveWindow(res))
		}
	}
	return fields, buf
}

// RetryAfterSeconds is the Retry-After of v in whole seconds: the longest
// wait of the hits that refused it, rounded up, at least 1; 0 when v is
// allowed, a look, or can never pass. Problem bodies repeat it.
func RetryAfterSeconds(v *engine.Verdict) int64 {
	if v.Allowed || v.Look || v.NeverPasses() {
		return 0
	}
	retry := int64(1)
	for _, i := range v.Violated {
		retry = max(retry, CeilSeconds(v.Results[i].Decision.RetryAfter))
	}
	return retry
}

// isAll reports whether ents are exactly w's enforced rules, in order.
func (w *Writer) isAll(ents []entry) bool {
	if len(ents) != len(w.enforced) || w.all == "" {
		return false
	}
	for k, e := range ents {
		if e.rule != w.enforced[k] {
			return false
		}
	}
	return true
}

func violated(r *engine.Result) bool {
	return !r.Rule.Shadow && (r.Outcome == engine.Refused || r.Outcome == engine.CanNeverPass)
}

// describesBetter reports whether a describes its rule better than b: a refusal
// first, then the state closer to exhaustion.
func describesBetter(a, b *engine.Result) bool {
	if violated(a) != violated(b) {
		return violated(a)
	}
	ad, bd := &a.Decision, &b.Decision
	return float64(ad.Remaining)*float64(bd.Limit) < float64(bd.Remaining)*float64(ad.Limit)
}

// effectiveWindow is the t of a result: the seconds until a refusal would
// pass (at least 1), else until the quota is whole again.
func effectiveWindow(r *engine.Result) int64 {
	if r.Outcome == engine.Refused {
		return max(CeilSeconds(r.Decision.RetryAfter), 1)
	}
	return CeilSeconds(r.Decision.ResetAfter)
}

// CeilSeconds rounds d up to whole seconds (0 for a negative d): the one
// conversion of a duration to the seconds of every field and body.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > math.MaxInt64-time.Second {
		return int64(d / time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}

// AppendInt appends the field name (key canonical) of value n to fields,
// in buf unless it is below 100 (strconv keeps 0–99 as constants).
func AppendInt(fields []Field, buf []byte, name, key string, n int64) ([]Field, []byte) {
	if n >= 0 && n < 100 {
		return append(fields, Field{Name: name, Key: key, Static: strconv.FormatInt(n, 10)}), buf
	}
	start := len(buf)
	buf = strconv.AppendInt(buf, n, 10)
	return append(fields, Field{Name: name, Key: key, Start: start, End: len(buf), Dynamic: true}), buf
}
