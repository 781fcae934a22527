//go:build !vtprotobuf

package rls

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// generatedCodec names BenchmarkCodec's generated marshalling.
const generatedCodec = "proto"

// marshalAppend appends m, marshalled by proto.Marshal, to out.
func marshalAppend(out []byte, m *pb.RateLimitResponse) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(out, m)
}
