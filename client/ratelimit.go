package client

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/dunglas/httpsfv"
)

// ErrMalformedField reports a RateLimit-Policy or RateLimit field that does
// not follow draft-ietf-httpapi-ratelimit-headers-11. The draft says clients
// MUST ignore such a field, and the Transport does.
var ErrMalformedField = errors.New("client: malformed rate-limit field")

// Policy is one quota policy item of the RateLimit-Policy response field
// (draft-ietf-httpapi-ratelimit-headers-11 §3), for example
// "burst";q=100;w=60.
type Policy struct {
	// Name is the policy identifier, an sf-string.
	Name string
	// Quota is q: the quota allocated by the policy, in Unit, per partition.
	Quota int64
	// Unit is qu; "requests" when the field omits it.
	Unit string
	// Window is w, the quota's time window in whole seconds; zero when the
	// field omits it.
	Window time.Duration
	// PartitionKey is pk, nil when absent.
	PartitionKey []byte
}

// Limit is one service limit item of the RateLimit response field
// (draft-ietf-httpapi-ratelimit-headers-11 §4), for example
// "default";r=50;t=30.
type Limit struct {
	// Name identifies the policy the item reports on.
	Name string
	// Remaining is r, the available quota in the policy's unit.
	Remaining int64
	// Window is t, the effective window: within Window the client should
	// use no more than Remaining. Meaningful only if HasWindow.
	Window time.Duration
	// HasWindow reports whether the item carried t.
	HasWindow bool
	// PartitionKey is pk, nil when absent.
	PartitionKey []byte
}

// ParsePolicies parses the RateLimit-Policy field from its field lines (pass
// h.Values("RateLimit-Policy"): the draft allows splitting the list over
// several lines). It returns nil, nil when the field is absent or empty, and
// an error wrapping [ErrMalformedField] when any part of it is malformed: a
// bare item that is not a String, a missing or negative q, a w that is not a
// positive Integer, a qu that is not a String, a pk that is not a Byte
// Sequence, or a structured-field syntax error. Unknown parameters are
// ignored, as the draft requires. ParsePolicies never panics.
func ParsePolicies(lines []string) ([]Policy, error) {
	list, err := parseList(lines)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	out := make([]Policy, 0, len(list))
	for _, it := range list {
		name, ok := it.Value.(string)
		if !ok {
			return nil, fmt.Errorf("%w: policy identifier is not a string", ErrMalformedField)
		}
		p := Policy{Name: name, Unit: "requests"}
		q, ok := intParam(it, "q")
		if !ok || q < 0 {
			return nil, fmt.Errorf("%w: policy %q: q must be a non-negative integer", ErrMalformedField, name)
		}
		p.Quota = q
		if v, present := it.Params.Get("qu"); present {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%w: policy %q: qu must be a string", ErrMalformedField, name)
			}
			p.Unit = s
		}
		if _, present := it.Params.Get("w"); present {
			w, ok := intParam(it, "w")
			if !ok || w <= 0 {
				return nil, fmt.Errorf("%w: policy %q: w must be a positive integer", ErrMalformedField, name)
			}
			p.Window = seconds(w)
		}
		if p.PartitionKey, err = pkParam(it); err != nil {
			return nil, fmt.Errorf("%w: policy %q: %v", ErrMalformedField, name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseLimits parses the RateLimit field from its field lines (pass
// h.Values("RateLimit")). It returns nil, nil when the field is absent or
// empty and an error wrapping [ErrMalformedField] when any item lacks a
// non-negative integer r, has a t that is not a non-negative Integer, a pk
// that is not a Byte Sequence, a bare item that is not a String, or when the
// structured-field syntax is broken. ParseLimits never panics.
func ParseLimits(lines []string) ([]Limit, error) {
	list, err := parseList(lines)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	out := make([]Limit, 0, len(list))
	for _, it := range list {
		name, ok := it.Value.(string)
		if !ok {
			return nil, fmt.Errorf("%w: limit identifier is not a string", ErrMalformedField)
		}
		l := Limit{Name: name}
		r, ok := intParam(it, "r")
		if !ok || r < 0 {
			return nil, fmt.Errorf("%w: limit %q: r must be a non-negative integer", ErrMalformedField, name)
		}
		l.Remaining = r
		if _, present := it.Params.Get("t"); present {
			t, ok := intParam(it, "t")
			if !ok || t < 0 {
				return nil, fmt.Errorf("%w: limit %q: t must be a non-negative integer", ErrMalformedField, name)
			}
			l.Window, l.HasWindow = seconds(t), true
		}
		if l.PartitionKey, err = pkParam(it); err != nil {
			return nil, fmt.Errorf("%w: limit %q: %v", ErrMalformedField, name, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// parseHeaderFields returns the policies and limits of h, each nil when its
// field is absent or malformed (the draft: malformed fields MUST be ignored).
func parseHeaderFields(h http.Header) ([]Policy, []Limit) {
	p, err := ParsePolicies(h.Values("RateLimit-Policy"))
	if err != nil {
		p = nil
	}
	l, err := ParseLimits(h.Values("RateLimit"))
	if err != nil {
		l = nil
	}
	return p, l
}

func parseList(lines []string) ([]httpsfv.Item, error) {
	if len(lines) == 0 {
		return nil, nil
	}
	list, err := httpsfv.UnmarshalList(lines)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedField, err)
	}
	items := make([]httpsfv.Item, 0, len(list))
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			return nil, fmt.Errorf("%w: inner lists are not allowed", ErrMalformedField)
		}
		items = append(items, it)
	}
	return items, nil
}

func intParam(it httpsfv.Item, key string) (int64, bool) {
	v, ok := it.Params.Get(key)
	if !ok {
		return 0, false
	}
	n, ok := v.(int64)
	return n, ok
}

func pkParam(it httpsfv.Item) ([]byte, error) {
	v, ok := it.Params.Get("pk")
	if !ok {
		return nil, nil
	}
	b, ok := v.([]byte)
	if !ok {
		return nil, errors.New("pk must be a byte sequence")
	}
	return b, nil
}

// seconds converts whole seconds to a Duration, saturating instead of
// overflowing (sf-integers reach 10^15, Durations about 9.2·10^9 s).
func seconds(n int64) time.Duration {
	if n > maxDelaySeconds {
		return time.Duration(maxDelaySeconds) * time.Second
	}
	return time.Duration(n) * time.Second
}
