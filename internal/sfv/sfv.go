// Package sfv writes the pieces of HTTP Structured Field Values (RFC 9651)
// that Portero's headers use. It exists so that every door quotes a policy
// name the same way.
package sfv

// AppendString appends s as a Structured Field String: quoted, with '"'
// and '\' escaped. An sf-string holds only printable ASCII, so any other
// byte becomes '?' (rule names are validated to need none of this; names
// taken from an envoyproxy/ratelimit file might).
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
