package rls

import (
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
// (and its QuotaMode for QUOTA_MODE) and an engine counting with
// engine.CountEach (and its ShadowAll for SHADOW_MODE); docs/envoy.md has
// the table of what changes and how each of Portero's improvements comes
// back:
//
//   - current_limit.name only when the configuration names the limit;
//   - duration_until_reset in whole seconds, as it rounds them, unless
//     ExactReset;
//   - headers as its LIMIT_RESPONSE_HEADERS_ENABLED writes them (Headers);
//   - RESPONSE_DYNAMIC_METADATA (Metadata);
//   - its errors: an empty domain or descriptor list, and no configuration
//     loaded at all, are gRPC UNKNOWN with its messages.
type Compat struct {
	// ExactReset keeps Portero's duration_until_reset, to the nanosecond.
	ExactReset bool
	// Headers is what response_headers_to_add carries.
	Headers HeaderStyle
	// HeaderNames are the names of HeadersEnvoyproxy's three fields;
	// empty ones are header.EnvoyproxyNames'.
	HeaderNames [3]string
	// Metadata fills dynamic_metadata: the request echoed (domain, each
	// descriptor's entries as key=value, its limit override and
	// hits_addend, the request's hits_addend) and the configured metadata
	// of the descriptors that passed, merged, the first value winning (its
	// RESPONSE_DYNAMIC_METADATA).
	Metadata bool
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

// withDefaults returns a copy of c with its empty HeaderNames set to the
// defaults, so that NewService resolves them once, not every answer.
func (c *Compat) withDefaults() *Compat {
	cc := *c
	for i, n := range cc.HeaderNames {
		if n == "" {
			cc.HeaderNames[i] = hdr.EnvoyproxyNames[i]
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

// compatAnswer adds envoyproxy/ratelimit's header fields and metadata to
// a, decided.
func (s *Service) compatAnswer(a *answer, req *descriptor.Request, now time.Time) {
	c := s.opts.Compat
	a.compat = c
	switch c.Headers {
	case HeadersEnvoyproxy:
		a.fields, a.buf = hdr.AppendEnvoyproxy(a.fields, a.buf, &a.v, &c.HeaderNames, now)
	case HeadersIETF:
		a.fields, a.buf = writer.Append(a.fields, a.buf, &a.v)
	}
	if c.Metadata {
		a.metadata = dynamicMetadata(req, a.statuses)
	}
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
