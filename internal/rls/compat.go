package rls

import (
	"math"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/portero-rl/portero/descriptor"
	hdr "github.com/portero-rl/portero/engine/header"
)

// Compat makes the service answer as envoyproxy/ratelimit does, protobuf
// for protobuf, given a compiler built with descriptor.Options.Envoyproxy
// and an engine counting with engine.CountEach (docs/envoy.md has the
// table of what changes and how each of Portero's improvements comes
// back):
//
//   - current_limit.name only when the configuration names the limit;
//   - duration_until_reset in whole seconds, as it rounds them (the
//     window's length minus the Unix second's offset in it), unless
//     ExactReset;
//   - headers as its LIMIT_RESPONSE_HEADERS_ENABLED writes them (Headers);
//   - SHADOW_MODE (ShadowMode) and RESPONSE_DYNAMIC_METADATA (Metadata);
//   - its errors: an empty domain or descriptor list, and no configuration
//     loaded at all, are gRPC UNKNOWN with its messages.
type Compat struct {
	// ExactReset keeps Portero's duration_until_reset, to the nanosecond.
	ExactReset bool
	// Headers is what response_headers_to_add carries.
	Headers HeaderStyle
	// HeaderNames are the names of HeadersEnvoyproxy's three fields (its
	// LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER);
	// empty ones are RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset.
	HeaderNames [3]string
	// ShadowMode answers every request OK, the descriptor statuses
	// unchanged (its SHADOW_MODE).
	ShadowMode bool
	// Metadata fills dynamic_metadata: the request echoed (domain, each
	// descriptor's entries as key=value, its limit override and
	// hits_addend, the request's hits_addend) and the configured metadata
	// of the descriptors that passed, merged, the first value winning (its
	// RESPONSE_DYNAMIC_METADATA).
	Metadata bool
	// QuotaMode is its QUOTA_MODE: every descriptor but the unlimited
	// ones is a quota descriptor, one that matched no limit (or whose
	// limit another replaced) included, and such a descriptor passes.
	QuotaMode bool
}

// HeaderStyle says which rate limit fields go into response_headers_to_add.
type HeaderStyle string

// The header styles.
const (
	// HeadersNone adds none (envoyproxy/ratelimit's default).
	HeadersNone HeaderStyle = "off"
	// HeadersEnvoyproxy adds envoyproxy/ratelimit's three fields for the
	// descriptor closest to its limit, or the last one over it:
	// RateLimit-Limit (requests_per_unit), RateLimit-Remaining and
	// RateLimit-Reset (whole seconds to the window's end).
	HeadersEnvoyproxy HeaderStyle = "envoyproxy"
	// HeadersIETF adds Portero's RateLimit, RateLimit-Policy and
	// Retry-After (draft-ietf-httpapi-ratelimit-headers-11), which Envoy
	// passes to clients.
	HeadersIETF HeaderStyle = "ietf"
)

// ParseHeaderStyle reads off, envoyproxy or ietf.
func ParseHeaderStyle(s string) (HeaderStyle, error) {
	switch h := HeaderStyle(s); h {
	case HeadersNone, HeadersEnvoyproxy, HeadersIETF:
		return h, nil
	}
	return "", status.Errorf(codes.InvalidArgument, "headers %q: want off, envoyproxy or ietf", s)
}

// Default names of HeadersEnvoyproxy's fields.
var envoyproxyHeaderNames = [3]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}

// withDefaults returns a copy of c with its empty HeaderNames set to the
// defaults, so that NewService resolves them once, not every answer.
func (c *Compat) withDefaults() *Compat {
	cc := *c
	for i, n := range cc.HeaderNames {
		if n == "" {
			cc.HeaderNames[i] = envoyproxyHeaderNames[i]
		}
	}
	return &cc
}

// envoyproxy's errors, as its service answers them (a Go error, which
// grpc-go sends as UNKNOWN).
var (
	errNoConfig      = status.Error(codes.Unknown, "no rate limit configuration loaded")
	errEmptyDomain   = status.Error(codes.Unknown, "rate limit domain must not be empty")
	errNoDescriptors = status.Error(codes.Unknown, "rate limit descriptor list must not be empty")
)

// compatRequestError is the error envoyproxy/ratelimit answers for a
// request the compiler refused.
func compatRequestError(req *descriptor.Request, err error) error {
	switch {
	case req.Domain == "":
		return errEmptyDomain
	case len(req.Descriptors) == 0:
		return errNoDescriptors
	}
	return status.Error(codes.Unknown, err.Error())
}

// compatAnswer turns a's verdict into envoyproxy/ratelimit's answer.
func (s *Service) compatAnswer(a *answer, req *descriptor.Request, now time.Time) {
	c := s.opts.Compat
	a.compat = c
	a.code = compatCode(a.statuses, c.QuotaMode)
	if c.ShadowMode {
		a.code = descriptor.OK
	}
	for i := range a.statuses {
		st := &a.statuses[i]
		if !c.ExactReset && st.ResetAfter > 0 {
			st.ResetAfter = ceilSecond(st.ResetAfter)
		}
	}
	switch c.Headers {
	case HeadersEnvoyproxy:
		a.fields, a.buf = appendEnvoyproxyHeaders(a.fields, a.buf, a.statuses, &c.HeaderNames, now)
	case HeadersIETF:
		a.fields, a.buf = writer.Append(a.fields, a.buf, &a.v)
	}
	if c.Metadata {
		a.metadata = dynamicMetadata(req, a.statuses)
	}
}

// compatCode is envoyproxy/ratelimit's overall code, from the statuses:
// OVER_LIMIT when a descriptor that is not a quota one is over its limit,
// or when there are quota descriptors and every one is over. A shadow
// limit's status is OK, so it passes there too.
func compatCode(sts []descriptor.Status, globalQuota bool) descriptor.Code {
	quotas, quotasOver := 0, 0
	for i := range sts {
		st := &sts[i]
		if st.Unlimited {
			continue
		}
		quota := globalQuota || st.Limit != nil && st.Limit.Rule != nil && st.Limit.Rule.QuotaMode
		switch {
		case st.Code == descriptor.OverLimit && !quota:
			return descriptor.OverLimit
		case st.Code == descriptor.OverLimit:
			quotasOver++
		}
		if quota {
			quotas++
		}
	}
	if quotas > 0 && quotas == quotasOver {
		return descriptor.OverLimit
	}
	return descriptor.OK
}

// ceilSecond rounds d up to a whole second: the window's length minus the
// whole seconds already gone, as envoyproxy/ratelimit computes it from the
// Unix second.
func ceilSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

// appendEnvoyproxyHeaders appends envoyproxy/ratelimit's three fields for
// the descriptor with the least remaining (the first of equals), or the
// last one over its limit but for quota descriptors; none when no
// descriptor reports a limit. names are resolved (withDefaults).
func appendEnvoyproxyHeaders(fields []hdr.Field, buf []byte, sts []descriptor.Status, names *[3]string, now time.Time) ([]hdr.Field, []byte) {
	pick := -1
	least := int64(math.MaxUint32)
	for i := range sts {
		st := &sts[i]
		if announced(st) && st.Remaining < least {
			pick, least = i, st.Remaining
		}
		if st.Limit != nil && !st.Unlimited && st.Code == descriptor.OverLimit && !st.Limit.Rule.QuotaMode {
			pick, least = i, 0
		}
	}
	if pick < 0 || sts[pick].Limit == nil {
		return fields, buf
	}
	st := &sts[pick]
	var reset int64
	if r := st.Limit.Rule; r != nil && (r.Limit.IsCalendar() || !st.Limit.Unit.Valid()) {
		// Portero's extension: a calendar quota's period or a look-back
		// window has no epoch-aligned unit (and a look-back's unit is
		// UNKNOWN, 0 s): the reset is the status's own.
		reset = hdr.CeilSeconds(st.ResetAfter)
	} else {
		w := int64(st.Limit.Unit.Duration() / time.Second)
		reset = w - floorMod(now.Unix(), w)
	}
	for k, v := range []int64{int64(st.Limit.RequestsPerUnit), max(st.Remaining, 0), reset} {
		start := len(buf)
		buf = strconv.AppendInt(buf, v, 10)
		fields = append(fields, hdr.Field{Name: names[k], Key: names[k], Dynamic: true, Start: start, End: len(buf)})
	}
	return fields, buf
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// dynamicMetadata is envoyproxy/ratelimit's ratelimitToMetadata: the
// request echoed, and the metadata of the descriptors that passed (not
// over their limit; unlimited ones are not counted among them), merged so
// that the first value of a key wins and mappings merge key by key.
func dynamicMetadata(req *descriptor.Request, sts []descriptor.Status) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.Descriptors))
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		entries := make([]*structpb.Value, len(d.Entries))
		for j, e := range d.Entries {
			entries[j] = structpb.NewStringValue(e.Key + "=" + e.Value)
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if o := d.Override; o != nil {
			// envoyproxy/ratelimit writes protobuf's text form, which
			// protobuf-go randomises on purpose (an extra space, or not):
			// this is its form with single spaces.
			var txt []byte
			if o.RequestsPerUnit != 0 {
				txt = strconv.AppendUint(append(txt, "requests_per_unit:"...), uint64(o.RequestsPerUnit), 10)
			}
			if o.Unit != 0 {
				if len(txt) > 0 {
					txt = append(txt, ' ')
				}
				txt = append(append(txt, "unit:"...), overrideUnitName(o.Unit)...)
			}
			f["limit"] = structpb.NewStringValue(string(txt))
		}
		if d.Hits != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(*d.Hits))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.Domain),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if req.Hits != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(req.Hits))
	}
	passed := map[string]any{}
	for i := range sts {
		st := &sts[i]
		if st.Unlimited || st.Code == descriptor.OverLimit || st.Limit == nil || st.Limit.Metadata == nil {
			continue
		}
		mergeFirst(passed, st.Limit.Metadata)
	}
	if len(passed) > 0 {
		if m, err := structpb.NewStruct(passed); err == nil {
			fields["metadata"] = structpb.NewStructValue(m)
		}
	}
	return &structpb.Struct{Fields: fields}
}

// mergeFirst adds src's keys missing from dst; where both hold mappings it
// merges them in turn. dst's mappings are its own copies: src, the
// configuration's, is never changed.
func mergeFirst(dst, src map[string]any) {
	for k, v := range src {
		old, ok := dst[k]
		if !ok {
			if m, isMap := v.(map[string]any); isMap {
				cp := map[string]any{}
				mergeFirst(cp, m)
				v = cp
			}
			dst[k] = v
			continue
		}
		om, ok1 := old.(map[string]any)
		vm, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			mergeFirst(om, vm)
		}
	}
}

// overrideUnitName is the name of an override's unit in envoy.type.v3's
// RateLimitUnit, as protobuf's text form writes it.
func overrideUnitName(u descriptor.Unit) string {
	switch u {
	case descriptor.Second:
		return "SECOND"
	case descriptor.Minute:
		return "MINUTE"
	case descriptor.Hour:
		return "HOUR"
	case descriptor.Day:
		return "DAY"
	case descriptor.Month:
		return "MONTH"
	case descriptor.Year:
		return "YEAR"
	}
	return strconv.Itoa(int(u))
}

// limitName is current_limit.name: the configured name under Compat, the
// policy name (the name, or envoyproxy/ratelimit's full key) otherwise.
func (a *answer) limitName(l *descriptor.Limit) string {
	if a.compat != nil {
		return l.Name
	}
	return l.PolicyName()
}
