package rls

import (
	"math"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/portero-rl/portero/descriptor"
)

// Both transports read RateLimitRequest and write RateLimitResponse with
// protowire (the protobuf module's own wire primitives) straight from and
// into the compiler's types, without the generated types: their
// proto.Unmarshal, the conversions and their marshalling cost a third more
// server CPU per call on the lean transport and a sixth more on grpc-go
// (docs/benchmarks-rls.md). wire_test.go holds the result equal, byte for
// byte, to the generated types' on random and fuzzed messages.

// Field numbers, from envoy/service/ratelimit/v3/rls.proto and
// envoy/extensions/common/ratelimit/v3/ratelimit.proto.
const (
	reqDomain      = 1 // string
	reqDescriptors = 2 // repeated RateLimitDescriptor
	reqHitsAddend  = 3 // uint32

	descEntries        = 1 // repeated Entry
	descLimit          = 2 // RateLimitOverride
	descHitsAddend     = 3 // google.protobuf.UInt64Value
	descIsNegativeHits = 4 // bool

	entryKey   = 1 // string
	entryValue = 2 // string

	overrideRequestsPerUnit = 1 // uint32
	overrideUnit            = 2 // envoy.type.v3.RateLimitUnit

	wrapperValue = 1

	respOverallCode     = 1 // Code
	respStatuses        = 2 // repeated DescriptorStatus
	respHeaders         = 3 // repeated config.core.v3.HeaderValue
	respDynamicMetadata = 6 // google.protobuf.Struct

	statusCode               = 1 // Code
	statusCurrentLimit       = 2 // RateLimit
	statusLimitRemaining     = 3 // uint32
	statusDurationUntilReset = 4 // google.protobuf.Duration

	limitRequestsPerUnit = 1 // uint32
	limitUnit            = 2 // Unit
	limitName            = 3 // string

	headerKey   = 1
	headerValue = 2

	durationSeconds = 1
	durationNanos   = 2
)

// decode fills rb from a serialized RateLimitRequest. Strings are
// substrings of one copy of msg, so that a request costs one string
// allocation however many entries it has.
func (rb *requestBlock) decode(msg []byte) (*descriptor.Request, error) {
	req := &rb.req
	req.Descriptors = rb.descs[:0:inlineDescriptors]
	d := wireDecoder{rb: rb, all: string(msg), entries: rb.entries[:0:inlineEntries]}
	for off := 0; off < len(msg); {
		num, typ, n := consumeTag(msg[off:])
		if n < 0 {
			return nil, errWire
		}
		off += n
		switch {
		case num == reqDomain && typ == protowire.BytesType:
			v, next, err := d.bytes(msg, off)
			if err != nil {
				return nil, err
			}
			req.Domain, off = d.all[v:next], next
			if !utf8.ValidString(req.Domain) {
				return nil, errBadUTF8
			}
		case num == reqHitsAddend && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(msg[off:])
			if n < 0 {
				return nil, errWire
			}
			req.Hits, off = uint32(x), off+n
		case num == reqDescriptors && typ == protowire.BytesType:
			v, next, err := d.bytes(msg, off)
			if err != nil {
				return nil, err
			}
			req.Descriptors = append(req.Descriptors, descriptor.Descriptor{})
			if err := d.descriptor(len(req.Descriptors)-1, msg[:next], v); err != nil {
				return nil, err
			}
			off = next
		default:
			n := protowire.ConsumeFieldValue(num, typ, msg[off:])
			if n < 0 {
				return nil, errWire
			}
			off += n
		}
	}
	// Each descriptor's Entries has the right length but may point into
	// an array that append has since replaced: point them all into the
	// final one.
	k := 0
	for i := range req.Descriptors {
		e := &req.Descriptors[i]
		m := len(e.Entries)
		e.Entries = d.entries[k : k+m : k+m]
		k += m
	}
	for i := range req.Descriptors {
		req.Descriptors[i].Negative = d.negative[i]
	}
	return req, nil
}

var (
	errWire    = status.Error(codes.InvalidArgument, "malformed RateLimitRequest: bad protobuf encoding")
	errBadUTF8 = status.Error(codes.InvalidArgument, "malformed RateLimitRequest: a string field holds invalid UTF-8")
)

// consumeTag is protowire.ConsumeTag refusing field numbers above
// protowire.MaxValidNumber, as proto.Unmarshal refuses them.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

// wireDecoder is the state of one decode.
type wireDecoder struct {
	rb       *requestBlock
	all      string // a copy of the whole message: strings are cut from it
	entries  []descriptor.Entry
	negative map[int]bool // descriptors with is_negative_hits set
}

// bytes reads the length-delimited value at msg[off:] and returns where
// its content starts and ends.
func (d *wireDecoder) bytes(msg []byte, off int) (start, end int, err error) {
	v, n := protowire.ConsumeBytes(msg[off:])
	if n < 0 {
		return 0, 0, errWire
	}
	return off + n - len(v), off + n, nil
}

// descriptor decodes descriptor i, the bytes msg[start:].
func (d *wireDecoder) descriptor(i int, msg []byte, start int) error {
	desc := &d.rb.req.Descriptors[i]
	first := len(d.entries)
	for off := start; off < len(msg); {
		num, typ, n := consumeTag(msg[off:])
		if n < 0 {
			return errWire
		}
		off += n
		switch {
		case num == descEntries && typ == protowire.BytesType:
			v, next, err := d.bytes(msg, off)
			if err != nil {
				return err
			}
			e, err := d.entry(msg[:next], v)
			if err != nil {
				return err
			}
			d.entries = append(d.entries, e)
			off = next
		case num == descLimit && typ == protowire.BytesType:
			v, next, err := d.bytes(msg, off)
			if err != nil {
				return err
			}
			// A message field seen twice is merged, as proto.Unmarshal
			// merges it.
			if desc.Override == nil {
				desc.Override = new(descriptor.Override)
			}
			if err := decodeOverride(msg[v:next], desc.Override); err != nil {
				return err
			}
			off = next
		case num == descHitsAddend && typ == protowire.BytesType:
			v, next, err := d.bytes(msg, off)
			if err != nil {
				return err
			}
			if desc.Hits == nil {
				if i < inlineDescriptors {
					d.rb.hits[i] = 0
					desc.Hits = &d.rb.hits[i]
				} else {
					desc.Hits = new(uint64)
				}
			}
			if err := decodeUint64Value(msg[v:next], desc.Hits); err != nil {
				return err
			}
			off = next
		case num == descIsNegativeHits && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(msg[off:])
			if n < 0 {
				return errWire
			}
			if x != 0 {
				if d.negative == nil {
					d.negative = map[int]bool{}
				}
				d.negative[i] = true
			} else {
				delete(d.negative, i)
			}
			off += n
		default:
			n := protowire.ConsumeFieldValue(num, typ, msg[off:])
			if n < 0 {
				return errWire
			}
			off += n
		}
	}
	desc.Entries = d.entries[first:]
	return nil
}

// entry decodes the Entry msg[start:].
func (d *wireDecoder) entry(msg []byte, start int) (descriptor.Entry, error) {
	var e descriptor.Entry
	for off := start; off < len(msg); {
		num, typ, n := consumeTag(msg[off:])
		if n < 0 {
			return e, errWire
		}
		off += n
		if (num == entryKey || num == entryValue) && typ == protowire.BytesType {
			v, next, err := d.bytes(msg, off)
			if err != nil {
				return e, err
			}
			// Every occurrence must be valid UTF-8, as proto.Unmarshal
			// checks each one, not only the value kept.
			str := d.all[v:next]
			if !utf8.ValidString(str) {
				return e, errBadUTF8
			}
			if num == entryKey {
				e.Key = str
			} else {
				e.Value = str
			}
			off = next
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, msg[off:])
		if n < 0 {
			return e, errWire
		}
		off += n
	}
	return e, nil
}

// decodeOverride merges a RateLimitOverride into o.
func decodeOverride(b []byte, o *descriptor.Override) error {
	return decodeVarints(b, func(num protowire.Number, x uint64) {
		switch num {
		case overrideRequestsPerUnit:
			o.RequestsPerUnit = uint32(x)
		case overrideUnit:
			o.Unit = descriptor.Unit(int32(x))
		}
	})
}

// decodeUint64Value merges a google.protobuf.UInt64Value into v.
func decodeUint64Value(b []byte, v *uint64) error {
	return decodeVarints(b, func(num protowire.Number, x uint64) {
		if num == wrapperValue {
			*v = x
		}
	})
}

// decodeVarints walks a message whose known fields are all varints,
// passing each varint field to set and skipping every other field.
func decodeVarints(b []byte, set func(num protowire.Number, x uint64)) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
		if typ == protowire.VarintType {
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errWire
			}
			set(num, x)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
	}
	return nil
}

// appendResponse appends a serialized as a RateLimitResponse, fields in
// number order as proto.Marshal writes them.
func appendResponse(b []byte, a *answer) []byte {
	if a.code != 0 {
		b = protowire.AppendTag(b, respOverallCode, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.code))
	}
	for i := range a.statuses {
		st := &a.statuses[i]
		name := ""
		if st.Limit != nil {
			name = a.limitName(st.Limit)
		}
		b = protowire.AppendTag(b, respStatuses, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(statusSize(st, name)))
		b = appendStatus(b, st, name)
	}
	for _, f := range a.fields {
		v := len(f.Static) + f.End - f.Start
		n := sizeString(headerKey, f.Name)
		if v > 0 {
			n += protowire.SizeTag(headerValue) + protowire.SizeBytes(v)
		}
		b = protowire.AppendTag(b, respHeaders, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		b = appendString(b, headerKey, f.Name)
		if v > 0 {
			b = protowire.AppendTag(b, headerValue, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(v))
			b = append(append(b, f.Static...), f.Bytes(a.buf)...)
		}
	}
	if a.metadata != nil {
		// Rare (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA): the
		// generated type's own encoding.
		m, err := proto.MarshalOptions{Deterministic: true}.Marshal(a.metadata)
		if err == nil {
			b = protowire.AppendTag(b, respDynamicMetadata, protowire.BytesType)
			b = protowire.AppendBytes(b, m)
		}
	}
	return b
}

// statusFields are a DescriptorStatus's limit_remaining (clamped to
// uint32) and duration_until_reset (as durationpb.New splits it).
func statusFields(st *descriptor.Status) (remaining uint64, seconds int64, nanos int32) {
	remaining = uint64(min(max(st.Remaining, 0), math.MaxUint32))
	seconds, nanos = int64(st.ResetAfter/time.Second), int32(st.ResetAfter%time.Second)
	return
}

func statusSize(st *descriptor.Status, name string) int {
	remaining, seconds, nanos := statusFields(st)
	n := sizeVarint(statusCode, uint64(st.Code)) + sizeVarint(statusLimitRemaining, remaining)
	if announced(st) {
		ln := limitSize(st.Limit, name)
		n += protowire.SizeTag(statusCurrentLimit) + protowire.SizeBytes(ln)
		dn := sizeVarint(durationSeconds, uint64(seconds)) + sizeVarint(durationNanos, uint64(int64(nanos)))
		n += protowire.SizeTag(statusDurationUntilReset) + protowire.SizeBytes(dn)
	}
	return n
}

func limitSize(l *descriptor.Limit, name string) int {
	return sizeVarint(limitRequestsPerUnit, uint64(l.RequestsPerUnit)) +
		sizeVarint(limitUnit, uint64(int64(l.Unit))) +
		sizeString(limitName, name)
}

func appendStatus(b []byte, st *descriptor.Status, name string) []byte {
	remaining, seconds, nanos := statusFields(st)
	b = appendVarint(b, statusCode, uint64(st.Code))
	if announced(st) {
		l := st.Limit
		b = protowire.AppendTag(b, statusCurrentLimit, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(limitSize(l, name)))
		b = appendVarint(b, limitRequestsPerUnit, uint64(l.RequestsPerUnit))
		b = appendVarint(b, limitUnit, uint64(int64(l.Unit)))
		b = appendString(b, limitName, name)
	}
	b = appendVarint(b, statusLimitRemaining, remaining)
	if announced(st) {
		dn := sizeVarint(durationSeconds, uint64(seconds)) + sizeVarint(durationNanos, uint64(int64(nanos)))
		b = protowire.AppendTag(b, statusDurationUntilReset, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(dn))
		b = appendVarint(b, durationSeconds, uint64(seconds))
		b = appendVarint(b, durationNanos, uint64(int64(nanos)))
	}
	return b
}

// sizeVarint and appendVarint handle a proto3 scalar: absent when zero.
func sizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
