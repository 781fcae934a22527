// Package fileerr formats a problem found in a configuration file the one
// way Portero reports it, whichever reader found it (internal/config for
// Portero's YAML, internal/config/envoyconf for envoyproxy/ratelimit's):
//
//	FILE[:LINE[:COLUMN]]: [FIELD: ]MESSAGE
//
// such as "portero.yaml:12: rules[2].limit: 0/min: ...". It imports nothing
// but the standard library, so both readers can use it without importing
// each other.
package fileerr

import "strconv"

// Format returns the message of a problem in file at line and column (0 when
// unknown; a column is shown only with a line) in field (empty for the whole
// file or a syntax error).
func Format(file string, line, column int, field, msg string) string {
	b := make([]byte, 0, len(file)+len(field)+len(msg)+16)
	b = append(b, file...)
	if line > 0 {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(line), 10)
		if column > 0 {
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(column), 10)
		}
	}
	b = append(b, ": "...)
	if field != "" {
		b = append(b, field...)
		b = append(b, ": "...)
	}
	b = append(b, msg...)
	return string(b)
}
