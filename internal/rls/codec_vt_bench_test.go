//go:build vtprotobuf

package rls

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// generatedCodec names BenchmarkCodec's generated marshalling.
const generatedCodec = "vtproto"

// marshalAppend appends m, marshalled by go-control-plane's vtprotobuf
// code, to out.
func marshalAppend(out []byte, m *pb.RateLimitResponse) ([]byte, error) {
	n := m.SizeVT()
	start := len(out)
	out = append(out, make([]byte, n)...)
	if _, err := m.MarshalToSizedBufferVTStrict(out[start:]); err != nil {
		return nil, err
	}
	return out, nil
}
