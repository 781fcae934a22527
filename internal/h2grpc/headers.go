package h2grpc

import (
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// requestHeaders is what the server keeps of a request's header block. The
// connection's HPACK decoder emits into it field by field (emit), so that a
// request costs no header map, no field slice and, for the fields the
// client indexed, no string, where x/net's MetaHeadersFrame allocates all
// of them.
type requestHeaders struct {
	method, path, scheme           string
	contentType, timeout, encoding string
	contentLength                  string // "" when absent
	pseudo                         uint8  // pseudo-header fields seen, a bit each
	sawRegular                     bool
	malformed                      bool // RFC 9113 §8.2: a stream error
	tooLarge                       bool // over MaxHeaderListSize
	size, maxSize                  uint32
	blockBytes                     int // compressed bytes of the block so far
}

const (
	pseudoMethod uint8 = 1 << iota
	pseudoPath
	pseudoScheme
	pseudoAuthority
)

// reset prepares h for a new header block.
func (h *requestHeaders) reset(maxSize uint32) {
	*h = requestHeaders{maxSize: maxSize}
}

// emit takes one decoded field. It validates as x/net's Framer does for
// MetaHeadersFrame (field names lowercase tokens, values without CR, LF or
// NUL, pseudo-header fields first, known and not repeated) and as its
// server does for requests (no connection-specific fields, te only
// "trailers"); the decoder keeps decoding after a bad field so that its
// dynamic table stays in step with the client's.
func (h *requestHeaders) emit(f hpack.HeaderField) {
	if h.malformed || h.tooLarge {
		return
	}
	h.size += f.Size()
	if h.size > h.maxSize {
		h.tooLarge = true
		return
	}
	if !httpguts.ValidHeaderFieldValue(f.Value) {
		h.malformed = true
		return
	}
	if len(f.Name) > 0 && f.Name[0] == ':' {
		var bit uint8
		switch f.Name {
		case ":method":
			bit, h.method = pseudoMethod, f.Value
		case ":path":
			bit, h.path = pseudoPath, f.Value
		case ":scheme":
			bit, h.scheme = pseudoScheme, f.Value
		case ":authority":
			bit = pseudoAuthority
		}
		if bit == 0 || h.sawRegular || h.pseudo&bit != 0 {
			// Unknown (":status", ":protocol" without extended CONNECT),
			// after a regular field, or repeated.
			h.malformed = true
			return
		}
		h.pseudo |= bit
		return
	}
	h.sawRegular = true
	if !validFieldName(f.Name) {
		h.malformed = true
		return
	}
	switch f.Name {
	case "content-type":
		h.contentType = f.Value
	case "grpc-timeout":
		h.timeout = f.Value
	case "grpc-encoding":
		h.encoding = f.Value
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		h.malformed = true
	case "te":
		if f.Value != "trailers" {
			h.malformed = true
		}
	case "content-length":
		// Repeated, it must repeat the same value (RFC 9110 §8.6).
		if h.contentLength != "" && h.contentLength != f.Value {
			h.malformed = true
		}
		h.contentLength = f.Value
	}
}

// validFieldName reports whether name is a token without upper case, as
// HTTP/2 requires field names on the wire.
func validFieldName(name string) bool {
	return httpguts.ValidHeaderFieldName(name) && strings.ToLower(name) == name
}
